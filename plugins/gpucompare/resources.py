"""The files the package ships, found where the package is installed, never beside a checkout.

``pyproject.toml`` maps the project's top-level folders into the distribution: ``sql/`` is the
package ``gpucompare.sql``, ``dags/`` is ``gpucompare.dags`` and the shipped tables live in
``gpucompare/data/``. Everything here goes through :mod:`importlib.resources`, so an installed
wheel and an editable install (``pip install -e .``: ``make envs``, the image) resolve the
same files. A bare checkout on ``sys.path`` is not enough: ``gpucompare.sql`` and
``gpucompare.dags`` exist only through the build configuration.

The library reads these files with ordinary ``open()``/DuckDB/pyarrow calls, so each helper
returns a real :class:`~pathlib.Path`; pip always installs wheels unzipped, and a zipped
install is refused with a clear error rather than half working.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

from gpucompare.errors import PermanentError

SQL_PACKAGE = "gpucompare.sql"
DAGS_PACKAGE = "gpucompare.dags"
WORKER_PACKAGE = "bench_tasks"


class ResourceError(PermanentError):
    """A shipped file is missing: the installation is broken (re-install the package)."""


def _package_dir(package: str) -> Path:
    """The folder of ``package`` on disk."""
    try:
        root = files(package)
    except ModuleNotFoundError:
        raise ResourceError(f"package {package!r} is not importable: install gpucompare "
                            "(`pip install gpucompare`, or `pip install -e .` in a checkout)") from None
    if not isinstance(root, Path):
        raise ResourceError(f"package {package!r} is not a folder on disk ({root!r}); install gpucompare "
                            "unzipped, as pip does")
    return root


def _existing(path: Path, what: str) -> Path:
    if not path.exists():
        raise ResourceError(f"{what} not found at {path}: the gpucompare installation is incomplete")
    return path


def sql_dir() -> Path:
    """The report queries (``sql/`` in the project)."""
    return _package_dir(SQL_PACKAGE)


def sql_file(name: str) -> Path:
    """``sql/<name>`` (e.g. ``latest_dates.sql`` or ``athena/results.sql``)."""
    return _existing(sql_dir() / name, f"SQL file {name!r}")


def data_dir(*parts: str) -> Path:
    """A folder of the shipped tables: ``data_dir("prices")`` → ``gpucompare/data/prices``."""
    return _existing(_package_dir("gpucompare").joinpath("data", *parts), "/".join(("data", *parts)))


def shipped_table(name: str, what: str) -> Path:
    """A shipped CSV table of ``gpucompare/data`` (``what`` names it in the error when it is missing)."""
    path = data_dir() / name
    if not path.exists():
        raise ResourceError(f"{what} is missing at {path}: the installation is incomplete")
    return path


def table_lines(path: Path) -> Iterator[str]:
    """The lines of a shipped CSV table without its ``#`` comment lines (its sources and dates)."""
    with path.open(encoding="utf-8", newline="") as handle:
        yield from (line for line in handle if not line.startswith("#"))


def dags_dir() -> Path:
    """The DAG modules (``dags/`` in the project; ``gpucompare.dags`` when installed)."""
    return _package_dir(DAGS_PACKAGE)


def fleet_file() -> Path:
    """The fleet file shipped with the package (``dags/config/fleet.yaml``)."""
    return _existing(dags_dir() / "config" / "fleet.yaml", "the shipped fleet file")


def worker_dir() -> Path:
    """The worker package ``bench_tasks`` (its requirement files included)."""
    return _package_dir(WORKER_PACKAGE)
