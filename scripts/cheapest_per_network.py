"""Cheapest machine per network this month, and how its cost moved: the notebook API at work.

    .venv/bin/python scripts/cheapest_per_network.py [--lake ./lake] [--reports ./reports]
        [--mode score|train] [--month 2026-11]

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

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "plugins"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import gpucompare  # noqa: E402


def _month(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(f"{text}-01")
    except ValueError:
        raise argparse.ArgumentTypeError(f"--month {text!r} is not YYYY-MM") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", default=str(REPO / "lake"), help="lake URI (default ./lake)")
    parser.add_argument("--reports", default=str(REPO / "reports"), help="reports root (default ./reports)")
    parser.add_argument("--mode", default="score", choices=("score", "train"))
    parser.add_argument("--month", type=_month, default=None, help="YYYY-MM (default: this month, UTC)")
    args = parser.parse_args(argv)
    month = args.month or dt.datetime.now(dt.UTC).date().replace(day=1)
    next_month = (month + dt.timedelta(days=32)).replace(day=1)

    best = gpucompare.read("best_value", lake=args.lake)
    this_month = best[
        (best["mode"] == args.mode)
        & best["ranked"]
        & (best["result_date"] >= month)
        & (best["result_date"] < next_month)
    ]
    # rank 1 among this month's ranked figures (the ranking itself spans every date), per
    # methodology: an official figure is never set against a robust one
    cheapest = (this_month.sort_values("cost_per_million")
                .groupby(["network", "methodology"], as_index=False).head(1))
    if cheapest.empty:
        print(f"No ranked {args.mode} figure measured in {month:%Y-%m} (see best_value: not_ranked_reason).")
        return 0
    history = gpucompare.read_history("best_value", reports=args.reports)
    print(f"Cheapest machine per network, {args.mode}, figures of {month:%Y-%m}:")
    for row in cheapest.sort_values(["network", "methodology"]).itertuples():
        print(
            f"  {row.network:<13} {row.methodology:<8} {row.provider} {row.instance_type} "
            f"({row.gpu_model or row.device_kind}): "
            f"{row.cost_per_million:.4f} {row.currency} per million images "
            f"(measured {row.result_date}, price of {row.price_effective_from})"
        )
        if history.empty:
            continue
        # history days written before the methodology column held official figures only
        days_methodology = (history["methodology"].fillna("official") if "methodology" in history
                            else "official")
        same = history[
            (history["network"] == row.network)
            & (days_methodology == row.methodology)
            & (history["mode"] == args.mode)
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
    if history.empty:
        print(f"(no report history under {args.reports}/report_history yet: the reports DAG keeps one a day)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
