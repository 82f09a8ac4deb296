"""Files on an ``ssh`` target's host, over the connection's SFTP session.

Writes go to a temporary name and are renamed (a reader never sees half a config or
script, and a retried write is harmless); uploads and downloads copy whole files; the
sweep's progress log is read from where the last read stopped, across reconnections
(``ProgressReader``), and its exit-code file is polled beside it; ``read_tail`` gives the
last bytes of a log for an error message. Every function takes an open SFTP client: the
caller runs it through ``SSHConnection.retrying``.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import paramiko

from gpucompare.targets import runs
from gpucompare.targets.base import TargetError
from gpucompare.targets.ssh.commands import SweepPaths
from gpucompare.targets.ssh.options import TAIL_BYTES


def write_text(sftp: paramiko.SFTPClient, remote: str, text: str) -> None:
    """Write ``text`` to ``remote`` through a temporary name, renamed into place."""
    tmp = f"{remote}.tmp-{uuid.uuid4().hex[:8]}"
    with sftp.open(tmp, "w") as handle:
        handle.write(text.encode())
    sftp.posix_rename(tmp, remote)


def put_file(sftp: paramiko.SFTPClient, local: Path, remote: str) -> None:
    sftp.put(str(local), remote)


def get_file(sftp: paramiko.SFTPClient, remote: str, local: Path) -> None:
    try:
        sftp.get(remote, str(local))
    except FileNotFoundError as exc:
        raise TargetError(
            f"collect: {remote} is not on the host (was the run directory removed?)") from exc


class ProgressReader:
    """Reads a remote progress file from where it stopped, across reconnections."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self._splitter = runs.LineSplitter()
        self._lines: list[str] = []

    def read_from(self, sftp: paramiko.SFTPClient) -> None:
        try:
            handle = sftp.open(self.path, "r")
        except FileNotFoundError:
            return  # not started yet
        with handle:
            handle.seek(self.offset)
            while True:
                chunk = handle.read(65536)
                if not chunk:
                    break
                # Offset and lines advance together, chunk by chunk: a connection dropped
                # mid-read neither repeats nor skips a line when the read resumes.
                self.offset += len(chunk)
                self._lines.extend(self._splitter.feed(chunk))

    def take_lines(self) -> list[str]:
        lines, self._lines = self._lines, []
        return lines

    def flush(self) -> list[str]:
        return self.take_lines() + self._splitter.flush()


def read_tail(sftp: paramiko.SFTPClient, path: str) -> str:
    try:
        with sftp.open(path, "r") as handle:
            size = handle.stat().st_size or 0
            handle.seek(max(0, size - TAIL_BYTES))
            return handle.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def poll_exit_code(sftp: paramiko.SFTPClient, reader: ProgressReader, paths: SweepPaths) -> int | None:
    """Read the new progress lines; the sweep's exit status once it has one, else None."""
    reader.read_from(sftp)
    try:
        with sftp.open(paths.exit_code, "r") as handle:
            text = handle.read().decode().strip()
    except FileNotFoundError:
        return None
    # The exit status is written before the last progress lines may have been read.
    reader.read_from(sftp)
    try:
        return int(text)
    except ValueError:
        return None  # being written (never happens with mv, but harmless)
