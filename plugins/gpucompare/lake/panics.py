"""delta-rs's own panic text kept off the terminal.

When a write fails deep in delta-rs (a full disk: ``object_store``'s buffered writer "Already shut
down"), Rust's panic hook prints ``thread '…' panicked at …``, the message, a backtrace when
``RUST_BACKTRACE`` asks for one, and a ``note: … RUST_BACKTRACE …`` line straight to file
descriptor 2, before the Python exception reaches the command's one-line explanation. Around such
a call, ``rust_panics_quieted`` points descriptor 2 at a pipe (no disk needed: the disk may be the
full one) with ``RUST_BACKTRACE=0``, drops the panic blocks (logged at debug) and writes every
other line back to stderr, so nothing else is lost.

A failed write can leave delta-rs's tasks running past the block: their panic ("Already shut
down") then comes later, as the interpreter finalizes, after the command's own message. A process
that ends right after such a failure (the command line: ``hold_failed_writes``) keeps descriptor 2
on the pipe after a failed block, and ends through ``exit_if_held``: its message and any other
line written back, the panic blocks dropped, then ``os._exit`` without the finalization that would
wake those tasks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass
class _Held:
    """A quieted block whose descriptor 2 still points at its pipe (see the module docstring)."""

    saved_fd: int
    reader: threading.Thread
    chunks: list[bytes]
    saved_backtrace: str | None


#: Set by a process that ends right after a failed write (``hold_failed_writes``).
_HOLD_ON_FAILURE = False
_held: list[_Held] = []


def hold_failed_writes() -> None:
    """This process ends soon after a failure (the command line): after a failed quieted block,
    keep Rust's late panic text off the terminal until ``exit_if_held``."""
    global _HOLD_ON_FAILURE
    _HOLD_ON_FAILURE = True


def exit_if_held(code: int) -> None:
    """When a failed write is held (``hold_failed_writes``): what it and the process wrote since,
    panic blocks dropped, back on stderr, then ``os._exit(code)``. Otherwise nothing."""
    if not _held:
        return
    logging.shutdown()
    sys.stdout.flush()
    for held in reversed(_held):
        _release(held)
    _held.clear()
    sys.stderr.flush()
    os._exit(code)


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
    held = _Held(saved_fd, reader, chunks, saved_backtrace)
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        if failed and _HOLD_ON_FAILURE:
            _held.append(held)  # released by exit_if_held, after the command's own message
        else:
            _release(held)


def _release(held: _Held) -> None:
    """Descriptor 2 back on the terminal; the pipe's lines written there, panic blocks dropped."""
    sys.stderr.flush()
    os.dup2(held.saved_fd, 2)  # the pipe's last writer closes: the reader sees its end
    os.close(held.saved_fd)
    if held.saved_backtrace is None:
        os.environ.pop("RUST_BACKTRACE", None)
    else:
        os.environ["RUST_BACKTRACE"] = held.saved_backtrace
    held.reader.join(timeout=5)
    kept, panics = split_panics(b"".join(held.chunks).decode("utf-8", errors="replace"))
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
    """``text`` split into (the lines outside Rust panic blocks, the panic blocks). A block is a
    ``thread '…' panicked at`` line, the message line after it, then whatever of a backtrace and
    the ``note: … RUST_BACKTRACE …`` line follows (Rust prints the note after the first panic of a
    process only, so a later block ends at its message)."""
    kept: list[str] = []
    panics: list[str] = []
    lines_in_panic = 0  # 0: outside a block
    for line in text.splitlines(keepends=True):
        if line.startswith("thread '") and " panicked at " in line:
            lines_in_panic = 1
        elif lines_in_panic == 1:
            lines_in_panic = 2  # the message
        elif lines_in_panic and (_backtrace_line(line) or _note_line(line)):
            lines_in_panic += 1
        else:
            lines_in_panic = 0
        (panics if lines_in_panic else kept).append(line)
    return "".join(kept), "".join(panics)


def _note_line(line: str) -> bool:
    return line.startswith("note:") and "RUST_BACKTRACE" in line


def _backtrace_line(line: str) -> bool:
    stripped = line.strip()
    return stripped == "stack backtrace:" or stripped[:1].isdigit() or stripped.startswith("at ")
