"""The worker's code as one tarball named by its content, for targets that upload it.

The bundle holds the ``bench_tasks/`` package (its requirements files included) and
nothing else; it is byte-for-byte reproducible (sorted entries, fixed times and owners), so
its hash names the code exactly. A remote host keeps each version in
``<remote base>/bench-<hash>/`` and an upload is skipped when that directory is there; the
local target runs from the same bundle unpacked in the cache (:func:`unpacked_bundle`).

The package is found through :mod:`gpucompare.resources`, so this works the same from an
installed wheel (``site-packages/bench_tasks``) as from a checkout.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gpucompare import resources

#: Characters of the sha256 kept in names: enough to never collide between versions.
HASH_CHARS = 16
PACKAGE_NAME = "bench_tasks"
REQUIREMENTS = {"cpu": "requirements-cpu.txt", "gpu": "requirements-gpu.txt"}


@dataclass(frozen=True)
class WorkerBundle:
    """A built bundle: the tarball on this machine and the hashes that name it."""

    tarball: Path
    content_hash: str  # of every file, names included
    requirements_hashes: dict[str, str]  # cpu|gpu → hash of that requirements file

    @property
    def name(self) -> str:
        """``bench-<hash>``: the directory the code lives in on a host."""
        return f"bench-{self.content_hash}"


def package_dir() -> Path:
    """Where ``bench_tasks`` is on this machine (the checkout's copy when installed editable)."""
    return resources.worker_dir().resolve()


def bundle_files(root: Path | None = None) -> list[Path]:
    """The files that make up the worker, sorted, as paths relative to the package's parent."""
    root = root or package_dir()
    files = []
    for path in root.rglob("*"):
        relative = path.relative_to(root.parent)
        if not path.is_file() or "__pycache__" in relative.parts:
            continue
        if path.suffix in {".pyc", ".pyo"} or any(part.startswith(".") for part in relative.parts):
            continue
        files.append(relative)
    return sorted(files, key=lambda p: p.as_posix())


def _hash_files(base: Path, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for relative in files:
        data = (base / relative).read_bytes()
        # Name and length delimit each file so that moving bytes between files changes the hash.
        digest.update(f"{relative.as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:HASH_CHARS]


def local_code_hash() -> str:
    """The content hash of this machine's worker code, as the targets name the bundle they upload
    (the code hash ingest records for a run measured by it)."""
    root = package_dir()
    return _hash_files(root.parent, bundle_files(root))


def _tar_bytes(base: Path, files: list[Path]) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for relative in files:
            data = (base / relative).read_bytes()
            info = tarfile.TarInfo(relative.as_posix())
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def default_cache_dir() -> Path:
    """The worker bundles' cache: the ``cache_dir`` setting (``$GPUCOMPARE_CACHE_DIR``)."""
    from gpucompare import settings

    return settings.cache_dir()


def build_bundle(cache_dir: Path | None = None, root: Path | None = None) -> WorkerBundle:
    """Build (or find in the cache) the tarball of the worker's current code."""
    root = root or package_dir()
    base = root.parent
    files = bundle_files(root)
    if not files:
        raise FileNotFoundError(f"no worker code under {root}")
    content_hash = _hash_files(base, files)
    requirements_hashes = {
        kind: _hash_files(base, [Path(PACKAGE_NAME) / name])
        for kind, name in REQUIREMENTS.items()
        if (base / PACKAGE_NAME / name).is_file()
    }
    cache_dir = cache_dir or default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    tarball = cache_dir / f"bench-{content_hash}.tar.gz"
    if not tarball.is_file():
        # Written aside and renamed, so a concurrent build never sees half a tarball.
        fd, tmp_name = tempfile.mkstemp(dir=cache_dir, prefix=".bundle-", suffix=".tmp")
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(_tar_bytes(base, files))
        os.replace(tmp_name, tarball)
    return WorkerBundle(tarball=tarball, content_hash=content_hash,
                        requirements_hashes=requirements_hashes)


def unpacked_bundle(cache_dir: Path | None = None) -> Path:
    """The worker's current bundle unpacked in the cache: ``<cache>/bench-<hash>/bench_tasks/``.

    The local target puts this folder (and nothing else) on the worker's ``PYTHONPATH``: the
    parent of an installed ``bench_tasks`` is the orchestrator's site-packages, whose numpy 2
    would shadow the worker environment's numpy and break MXNet at import.
    """
    bundle = build_bundle(cache_dir=cache_dir)
    target = bundle.tarball.parent / bundle.name
    if (target / PACKAGE_NAME / "__main__.py").is_file():
        return target
    _remove_stale_unpacks(bundle.tarball.parent)
    # Unpacked aside and renamed, so a concurrent run never sees half a tree.
    staging = Path(tempfile.mkdtemp(dir=bundle.tarball.parent, prefix=".unpack-"))
    with tarfile.open(bundle.tarball) as tar:
        tar.extractall(staging, filter="data")
    try:
        os.rename(staging, target)
    except OSError:  # another process unpacked the same bundle first: use theirs
        if not (target / PACKAGE_NAME / "__main__.py").is_file():
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return target


#: An unpack takes well under a second; a staging folder this old was left by a killed process.
STALE_UNPACK_S = 3600


def _remove_stale_unpacks(cache_dir: Path) -> None:
    now = time.time()
    for staging in cache_dir.glob(".unpack-*"):
        try:
            if now - staging.stat().st_mtime > STALE_UNPACK_S:
                shutil.rmtree(staging, ignore_errors=True)
        except FileNotFoundError:  # removed by a concurrent caller
            continue
