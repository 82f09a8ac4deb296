"""Process checks from /proc, shared by the tests that must prove nothing is left running."""

from __future__ import annotations

from pathlib import Path


def _stat_fields(pid: int | str) -> list[str]:
    # The command name (2nd field) is in parentheses and may hold spaces: split after it.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_ids() -> list[int]:
    """Every process id on this machine now (some may end while the caller looks)."""
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def command_line(pid: int) -> str:
    """The command line of ``pid``, arguments joined by spaces; "" once it has ended."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def children_of(pid: int) -> list[int]:
    """Process ids whose parent is ``pid``."""
    found = []
    for child in process_ids():
        try:
            if int(_stat_fields(child)[1]) == pid:
                found.append(child)
        except (OSError, ValueError, IndexError):
            continue
    return found


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        return _stat_fields(pid)[0] != "Z"
    except (OSError, IndexError):
        return False
