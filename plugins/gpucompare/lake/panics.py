"""delta-rs's own panic text kept off the terminal.

When a write fails deep in delta-rs (a full disk: ``object_store``'s buffered writer "Already shut
down"), Rust's panic hook prints ``thread '…' panicked at …``, the message, a backtrace when
``RUST_BACKTRACE`` asks for one, and a ``note: … RUST_BACKTRACE …`` line straight to file
descriptor 2, before the Python exception reaches the command's one-line explanation. Around such
a call, ``rust_panics_quieted`` points descriptor 2 at a pipe (no disk needed: the disk may be the
full one) with ``RUST_BACKTRACE=0``, drops the panic blocks (logged at debug) and writes every
other line back to stderr, so nothing else is lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def rust_panics_quieted() -> Iterator[None]:
    """Run the block with Rust's panic output held back from the terminal (see the module)."""
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    saved_fd = os.dup(2)
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(read_end, chunks), daemon=True)
    reader.start()
    saved_backtrace = os.environ.get("RUST_BACKTRACE")
    os.environ["RUST_BACKTRACE"] = "0"
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved_fd, 2)  # the pipe's last writer closes: the reader sees its end
        os.close(saved_fd)
        if saved_backtrace is None:
            os.environ.pop("RUST_BACKTRACE", None)
        else:
            os.environ["RUST_BACKTRACE"] = saved_backtrace
        reader.join(timeout=5)
        kept, panics = split_panics(b"".join(chunks).decode("utf-8", errors="replace"))
        if panics:
            log.debug("delta-rs panicked (held back from the terminal):\n%s", panics)
        if kept:
            sys.stderr.write(kept)
            sys.stderr.flush()


def _drain(fd: int, chunks: list[bytes]) -> None:
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            chunks.append(chunk)


def split_panics(text: str) -> tuple[str, str]:
    """``text`` split into (the lines outside Rust panic blocks, the panic blocks). A block runs
    from ``thread '…' panicked at`` to its ``note:`` line naming ``RUST_BACKTRACE`` (or, without
    one, to the message line after the header)."""
    kept: list[str] = []
    panics: list[str] = []
    in_panic = False
    lines_in_panic = 0
    for line in text.splitlines(keepends=True):
        if line.startswith("thread '") and " panicked at " in line:
            in_panic, lines_in_panic = True, 0
        if not in_panic:
            kept.append(line)
            continue
        panics.append(line)
        lines_in_panic += 1
        ends = line.startswith("note:") and "RUST_BACKTRACE" in line
        no_note_follows = lines_in_panic >= 2 and not _backtrace_line(line) and "RUST_BACKTRACE" not in text
        if ends or no_note_follows:
            in_panic = False
    return "".join(kept), "".join(panics)


def _backtrace_line(line: str) -> bool:
    stripped = line.strip()
    return stripped == "stack backtrace:" or stripped[:1].isdigit() or stripped.startswith("at ")
