"""Which lines of delta-rs's stderr are Rust panic text (``gpucompare.lake.panics.split_panics``)."""

from __future__ import annotations

from gpucompare.lake.panics import split_panics

FIRST = ("thread 'tokio-rt-worker' (17628) panicked at object_store-0.13.2/src/buffered.rs:369:41:\n"
         "Already shut down\n"
         "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n")
#: Rust prints the note after a process's first panic only: a later one is its header and message
LATER = ("thread 'tokio-rt-worker' (17630) panicked at object_store-0.13.2/src/buffered.rs:369:41:\n"
         "Already shut down\n")
MESSAGE = "gpucompare compact: error: /lake: the disk holding it is full (or over quota)\n"


def test_a_later_panic_without_its_note_ends_at_its_message() -> None:
    """The command's own message after a second panic is kept (it was swallowed as part of the
    block, which then ran to the end of the text: CI showed an empty error)."""
    kept, panics = split_panics("start\n" + FIRST + LATER + MESSAGE + "\n")
    assert kept == "start\n" + MESSAGE + "\n"
    assert panics == FIRST + LATER


def test_a_lone_panic_before_the_message_is_dropped_and_nothing_else() -> None:
    kept, panics = split_panics(LATER + MESSAGE)
    assert (kept, panics) == (MESSAGE, LATER)
    assert split_panics(MESSAGE) == (MESSAGE, "")
