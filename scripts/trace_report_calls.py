"""Trace of the calls from the lake to the page in ``run_reports``: the modules entered, in order,
and how often the flow returns to a module it has left (issue 31).

    .venv/bin/python scripts/trace_report_calls.py [--rows 60000] [--lake DIR] [--repo DIR] [--show]

Builds a small synthetic lake (``scripts/bench_reports.py``'s, with its prices and exchange rates
written into the lake, so ``run_reports`` reads them as it reads a real lake's), then runs
``run_reports`` under ``sys.setprofile`` and records every call whose code is the project's
(``gpucompare.*`` modules and the page's Jinja templates). ``--repo DIR`` traces another checkout
of the project (e.g. ``git archive main`` unpacked in a folder) against the same lake: the
before and after of a change.

Two views of the same trace, for the whole run and for the page part (``render_page``):

* **first entries**: the order in which each function is first called, as the modules they
  belong to; consecutive calls in one module are one stay. A stay in a module the flow has
  already left is a return: the data going back to a room it was in. Rows formatted while the
  sections are drawn make the page part bounce between the section modules and the helpers.
* **layers** of the page part: ``python`` (the view builder: the ``page_*`` section modules,
  formatting, charts …) and ``templates`` (the Jinja templates). Prepared views mean one pass:
  python → templates, no return; Python run after the templates have started (a part prepared
  late, a template calling back into Python) shows as a return.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

PROJECT = "gpucompare."


def _paths(repo: Path) -> None:
    for path in (repo / "scripts", repo, repo / "plugins"):
        sys.path.insert(0, str(path))


def _room(frame: FrameType) -> str | None:
    """The module a frame runs in ('template:<name>' for a Jinja template), None when not ours."""
    filename = frame.f_code.co_filename
    if filename.endswith(".j2"):
        return "template:" + Path(filename).name
    name = frame.f_globals.get("__name__", "")
    return name.removeprefix(PROJECT) if name.startswith(PROJECT) else None


class Tracer:
    """Records, per call of the project's code: its room, and whether it runs inside render_page."""

    def __init__(self) -> None:
        self.first: list[tuple[str, bool]] = []  # (room, in page) at each function's first call
        self.seen: set[Any] = set()
        self.layers: list[str] = []  # the page part's layer at every call
        self.page_depth = 0

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event not in ("call", "return"):
            return
        room = _room(frame)
        if room is None:
            return
        entering_page = frame.f_code.co_name == "render_page" and room.endswith("reports.page")
        if event == "return":
            if entering_page:
                self.page_depth -= 1
            return
        if entering_page:
            self.page_depth += 1
        in_page = self.page_depth > 0
        if frame.f_code not in self.seen:
            self.seen.add(frame.f_code)
            self.first.append((room, in_page))
        if in_page:
            self.layers.append(_layer(room))


def _layer(room: str) -> str:
    return "templates" if room.startswith("template:") else "python"


def stays(rooms: list[str]) -> list[str]:
    """Consecutive entries in one room collapsed into one stay."""
    out: list[str] = []
    for room in rooms:
        if not out or out[-1] != room:
            out.append(room)
    return out


def describe(title: str, rooms: list[str], show: bool) -> None:
    sequence = stays(rooms)
    distinct = list(dict.fromkeys(sequence))
    returns = len(sequence) - len(distinct)
    print(f"{title}: {len(sequence)} stays in {len(distinct)} modules, "
          f"{returns} returns to a module already left")
    print("  entered, in order: " + ", ".join(distinct))
    if show:
        print("  stays: " + " → ".join(sequence))


def build_lake(lake: Path, rows: int) -> None:
    import bench_reports

    from gpucompare.lake import tables

    bench_reports.build_lake(lake, rows)
    target = tables.open_lake(str(lake))
    target.write_table("prices", "trace", bench_reports.bench_prices())
    target.write_table("fx", "trace", bench_reports.bench_fx())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60_000, help="result rows of the synthetic lake")
    parser.add_argument("--lake", type=Path, help="the lake (built here when it has no results)")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the checkout whose code is traced (default: this one)")
    parser.add_argument("--show", action="store_true", help="print every stay, not only the counts")
    args = parser.parse_args(argv)
    _paths(args.repo.resolve())
    from gpucompare.lake import tables
    from gpucompare.reports import build

    print(f"code traced: {Path(build.__file__).resolve().parent}")
    workdir = Path(tempfile.mkdtemp(prefix="gpucompare-trace-"))
    lake = args.lake or workdir / "lake"
    if not tables.open_lake(str(lake)).has_table("results"):
        build_lake(lake, args.rows)
    tracer = Tracer()
    sys.setprofile(tracer)
    try:
        build.run_reports(str(lake), str(workdir / "reports"))
    finally:
        sys.setprofile(None)
    describe("run_reports, lake to page", [room for room, _ in tracer.first], args.show)
    describe("the page part (render_page)", [room for room, in_page in tracer.first if in_page], args.show)
    layers = stays(tracer.layers)
    print(f"the page part by layer: {' → '.join(layers)} ({len(layers) - len(set(layers))} returns)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
