"""Getting the DAGs into any Airflow: ``gpucompare dags install DIR`` writes thin DAG files.

The DAG modules ship inside the package (``dags/`` in the project is ``gpucompare.dags``).
A deployment that installed the package only needs, in its DAGs folder, one small file per
DAG that runs the installed module::

    gpucompare dags install /opt/airflow/dags   # Helm image, Astronomer project's dags/, …

Why thin files rather than a DAG bundle: a DAGs folder is the one thing every way of running
Airflow has (a git-synced or baked-in folder with the Helm chart, an Astronomer project's
``dags/``, MWAA's S3 ``dags/`` prefix), while a bundle pointing into site-packages needs
``dag_bundle_config_list`` and a path that differs per image (and MWAA does not let you set
it). The files hold no logic, so upgrading is ``pip install -U gpucompare`` and nothing more;
they are rewritten by running the command again.

Each thin file executes its packaged module afresh (:func:`load`) rather than importing it:
an import would run the DAG definition once per process, so a second parse in the same
process (a DagBag in a test, ``airflow dags test``) would find no DAG. Airflow registers the
DAG against the thin file, so its ``fileloc`` is the file in the DAGs folder.
"""

from __future__ import annotations

import os
import runpy
import tempfile
from pathlib import Path

from gpucompare import resources
from gpucompare.errors import UsageError

#: First line of every file we write: files without it are never overwritten.
MARKER = "# Written by `gpucompare dags install`: runs the DAG shipped in the gpucompare package."
_TEMPLATE = '''{marker}
"""Airflow DAG {name} (module gpucompare.dags.{name}); re-run `gpucompare dags install` to update."""

from gpucompare.airflow.dag_files import load

load("{name}")
'''


def dag_names() -> list[str]:
    """The DAG modules shipped in the package (``gpucompare_*.py`` in ``gpucompare.dags``)."""
    return sorted(path.stem for path in resources.dags_dir().glob("gpucompare_*.py"))


def load(name: str) -> None:
    """Run the packaged DAG module ``name`` (what a thin file does).

    The DAG files call their ``@dag`` function at module level; Airflow's DagBag registers the
    DAG made while it parses a file against that file, i.e. the thin file.
    """
    if name not in dag_names():
        raise UsageError(f"DAG {name!r} is not shipped in gpucompare (shipped: {', '.join(dag_names())})")
    runpy.run_module(f"{resources.DAGS_PACKAGE}.{name}", run_name=f"gpucompare_dag_{name}")


def thin_file(name: str) -> str:
    """The text of the thin DAG file for ``name``."""
    return _TEMPLATE.format(marker=MARKER, name=name)


def install(directory: Path, *, force: bool = False) -> list[Path]:
    """Write one thin DAG file per shipped DAG into ``directory``; return the files written.

    A file of the same name that we did not write is left alone (a clear error), unless
    ``force``; ours are rewritten. Each file is written aside and renamed, so a DAG processor
    scanning the folder never parses half a file.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"dags install: {directory} is not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    plan = [(directory / f"{name}.py", thin_file(name)) for name in dag_names()]
    foreign = [path for path, _ in plan if path.exists() and not force
               and not path.read_text(encoding="utf-8", errors="replace").startswith(MARKER)]
    if foreign:
        raise UsageError(f"dags install: {', '.join(map(str, foreign))} exist and were not written by "
                         "gpucompare; move them away or pass --force")
    written = []
    for path, text in plan:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.stem}-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        written.append(path)
    return written
