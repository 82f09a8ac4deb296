"""Cheapest machine per network this month, and how its cost moved: the notebook API at work.

    .venv/bin/python scripts/cheapest_per_network.py [--lake LAKE] [--reports REPORTS]
        [--mode score|train] [--month 2026-11]

The lake and the reports default to the settings every command reads (GPUCOMPARE_LAKE,
GPUCOMPARE_REPORTS; ``make demo`` sets ./lake and ./reports). A published figure is called
published (with its publication date), a measured one measured; a declared price says so.

Reads ``best_value`` from the lake with ``gpucompare.read`` (the ranking of the nightly
report: measured and recent figures, flagged ones left out), keeps the rank-1 machine of
each network and methodology among figures measured in the month (figures timed under
different methodologies are never compared), then follows that machine's cost per
million images through the report history (``gpucompare.read_history``: one copy a day,
written by the reports DAG under ``<reports>/report_history/``). The same few lines work
in a notebook; every column is typed as in the BI contract (docs/reports.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "plugins"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import gpucompare  # noqa: E402

if TYPE_CHECKING:
    import pandas as pd


def _text(value: object) -> str:
    """A cell as text; a missing one (pandas NA: a CPU machine has no GPU model) as ''."""
    import pandas as pd

    return "" if value is None or pd.isna(value) else str(value)


def _month(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(f"{text}-01")
    except ValueError:
        raise argparse.ArgumentTypeError(f"--month {text!r} is not YYYY-MM") from None


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", default=None, help="lake URI (default: the lake setting, GPUCOMPARE_LAKE)")
    parser.add_argument("--reports", default=None,
                        help="reports root (default: the reports setting, GPUCOMPARE_REPORTS)")
    parser.add_argument("--mode", default="score", choices=("score", "train"))
    parser.add_argument("--month", type=_month, default=None, help="YYYY-MM (default: this month, UTC)")
    args = parser.parse_args(argv)
    from gpucompare import settings

    args.lake, args.reports = args.lake or settings.lake_uri(), args.reports or settings.reports_uri()
    return args


def _cheapest_in_month(best: pd.DataFrame, mode: str, month: dt.date) -> pd.DataFrame:
    """Rank 1 among the month's ranked figures of ``mode``, per network and methodology."""
    next_month = (month + dt.timedelta(days=32)).replace(day=1)
    this_month = best[
        (best["mode"] == mode)
        & best["ranked"]
        & (best["result_date"] >= month)
        & (best["result_date"] < next_month)
    ]
    # rank 1 among this month's ranked figures (the ranking itself spans every date), per
    # methodology: an official figure is never set against a robust one
    return (this_month.sort_values("cost_per_million")
            .groupby(["network", "methodology"], as_index=False).head(1))


def _print_machine(row: Any) -> None:
    when = "measured" if row.origin == "measured" else f"{row.origin} figure of"
    price = (f"{row.price_note}, from {row.price_effective_from}" if row.price_source == "declared"
             else f"price of {row.price_effective_from}")
    print(
        f"  {row.network:<13} {row.methodology:<8} {row.provider} {row.instance_type} "
        f"({_text(row.gpu_model) or row.device_kind}): "
        f"{row.cost_per_million:.4f} {row.currency} per million images "
        f"({when} {row.result_date}, {price})"
    )


def _print_cost_moves(history: pd.DataFrame, row: Any, mode: str) -> None:
    """How the machine's cost per million moved over the report history's days, if it did."""
    # history days written before the methodology column held official figures only
    days_methodology = (history["methodology"].fillna("official") if "methodology" in history
                        else "official")
    same = history[
        (history["network"] == row.network)
        & (days_methodology == row.methodology)
        & (history["mode"] == mode)
        & (history["provider"] == row.provider)
        & (history["instance_type"] == row.instance_type)
    ]
    moves = same.groupby("report_date")["cost_per_million"].min().dropna()
    if len(moves) > 1:
        first, last = moves.iloc[0], moves.iloc[-1]
        print(
            f"  {'':<22} cost over {len(moves)} report days: {first:.4f} ({moves.index[0]}) -> "
            f"{last:.4f} ({moves.index[-1]}), {(last / first - 1) * 100:+.1f} %"
        )


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    print(f"lake {args.lake}, reports {args.reports}")
    month = args.month or dt.datetime.now(dt.UTC).date().replace(day=1)
    cheapest = _cheapest_in_month(gpucompare.read("best_value", lake=args.lake), args.mode, month)
    if cheapest.empty:
        print(f"No ranked {args.mode} figure dated {month:%Y-%m} (see best_value: not_ranked_reason; "
              "a machine "
              "of your own ranks once it has a price: gpucompare add-price).")
        return 0
    history = gpucompare.read_history("best_value", reports=args.reports)
    print(f"Cheapest machine per network, {args.mode}, figures of {month:%Y-%m}:")
    for row in cheapest.sort_values(["network", "methodology"]).itertuples():
        _print_machine(row)
        if not history.empty:
            _print_cost_moves(history, row, args.mode)
    if history.empty:
        print(f"(no report history under {args.reports}/report_history yet: the reports DAG keeps one a day)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
