"""The ``compare`` report: two machines, two nights or two worker runtimes side by side per
configuration, in the spirit of Go's benchstat.

For each configuration (mode, network, dtype, batch size, GPUs, nodes, device kind, kvstore,
methodology; for nights and runtimes also the machine) measured on both sides: each side's
median throughput with its 95 % interval (:func:`stats.median_interval`), the change B / A - 1
with the interval of the ratio (:func:`stats.ratio_interval`, Hodges-Lehmann) and the
Mann-Whitney U test's p-value; where the test finds no significant difference (p >= 1 -
confidence) the change prints as ``~``, as benchstat does. A last row is the geometric mean of
the ratios of every configuration (benchstat's "geomean"), whatever their significance.

A side is chosen by ``--by``:

* ``machine``: ``provider/instance_type[/region[/market]]`` (e.g. ``leadergpu/ltbv14``);
* ``night``: a night's date (``YYYY-MM-DD``, every run of that UTC day) or a run id;
* ``runtime``: a worker runtime (the results' ``worker_runtime`` column).

The samples of a side are the repeats of its last ``nights`` ok runs of the configuration (a figure
published without its repeats counts as one sample: one figure against one figure is never
significant). Reads the lake through the reports' DuckDB set-up; writes nothing unless asked.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

import pyarrow as pa

from gpucompare.config import patterns
from gpucompare.lake.schema import MACHINE_KEY
from gpucompare.reports import stats
from gpucompare.reports.inputs import ReportInputs, ResultFiles, connect
from gpucompare.reports.report_set import MAX_NIGHTS, ReportError

#: what a side of a comparison may be
COMPARE_BY: tuple[str, ...] = ("machine", "night", "runtime")
CONFIG_KEY: tuple[str, ...] = ("mode", "network", "dtype", "batch_size", "gpu_count", "num_nodes",
                               "device_kind", "kvstore", "methodology")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class Side:
    """One side of a comparison: the SQL condition that selects its results and its label."""

    label: str
    where: str
    params: dict[str, object]


def _machine_side(text: str, prefix: str) -> Side:
    parts = text.split("/")
    if not 2 <= len(parts) <= 4 or not all(parts):
        raise ReportError(f"--by machine: {text!r} is not provider/instance_type[/region[/market]]")
    conditions, params = [], {}
    for name, value in zip(MACHINE_KEY, parts, strict=False):
        conditions.append(f"{name} = ${prefix}_{name}")
        params[f"{prefix}_{name}"] = value
    if len(parts) == 4 and parts[3] not in patterns.MARKETS:
        raise ReportError(f"--by machine: market {parts[3]!r} is not one of {', '.join(patterns.MARKETS)}")
    return Side(text, " AND ".join(conditions), params)


def side(by: str, text: str, prefix: str) -> Side:
    """The side named ``text`` under ``--by by`` (``prefix`` names its SQL parameters)."""
    if by not in COMPARE_BY:
        raise ReportError(f"--by {by!r} is not one of {', '.join(COMPARE_BY)}")
    if not text or len(text) > 256 or any(ord(c) < 32 for c in text):
        raise ReportError(f"--by {by}: {text!r} is not a name")
    if by == "machine":
        return _machine_side(text, prefix)
    if by == "night":
        if _DATE.fullmatch(text):
            return Side(text, f'CAST("date" AS VARCHAR) = ${prefix}_night', {f"{prefix}_night": text})
        return Side(text, f"run_id = ${prefix}_night", {f"{prefix}_night": text})
    return Side(text, f"worker_runtime = ${prefix}_runtime", {f"{prefix}_runtime": text})


def _key(by: str) -> tuple[str, ...]:
    return CONFIG_KEY if by == "machine" else MACHINE_KEY + CONFIG_KEY


def _side_samples(con, by: str, chosen: Side, nights: int) -> dict[tuple, list[float]]:
    """Configuration key -> the pooled samples of the side's last ``nights`` ok runs."""
    key = ", ".join(_key(by))
    query = f"""
        SELECT {key}, samples FROM (
            SELECT {key}, CASE WHEN len(images_per_sec_samples) > 0 THEN images_per_sec_samples
                               ELSE [images_per_sec] END AS samples,
                row_number() OVER (PARTITION BY {key} ORDER BY finished_at DESC NULLS LAST, run_id) AS age
            FROM (SELECT * REPLACE (coalesce(methodology, 'official') AS methodology) FROM results)
            WHERE status = 'ok' AND images_per_sec > 0 AND ({chosen.where})
        ) WHERE age <= $nights
    """  # noqa: S608 (column names are constants, values are parameters)
    found: dict[tuple, list[float]] = {}
    for row in con.execute(query, {**chosen.params, "nights": nights}).fetchall():
        found.setdefault(tuple(row[:-1]), []).extend(float(v) for v in row[-1])
    return found


def _row(key: dict, a: list[float], b: list[float], confidence: float) -> dict:
    a_ci, b_ci = stats.median_interval(a, confidence), stats.median_interval(b, confidence)
    test = stats.mann_whitney(a, b)
    ratio = stats.ratio_interval(a, b, confidence)
    a_median, b_median = statistics.median(a), statistics.median(b)
    return {**key,
            "a_images_per_sec": a_median, "a_low": a_ci.low if a_ci else None,
            "a_high": a_ci.high if a_ci else None, "a_samples": len(a),
            "b_images_per_sec": b_median, "b_low": b_ci.low if b_ci else None,
            "b_high": b_ci.high if b_ci else None, "b_samples": len(b),
            "change": b_median / a_median - 1,
            "change_low": ratio.low - 1 if ratio else None, "change_high": ratio.high - 1 if ratio else None,
            "p_value": test.p_value, "significant": test.significant(confidence)}


def compare(inputs: ReportInputs, by: str, a: str, b: str, *, nights: int = 1,
            confidence: float = stats.CONFIDENCE) -> pa.Table:
    """The comparison table of side ``a`` against side ``b`` (see the module doc); the last row,
    network ``geomean``, is the geometric mean of the ratios."""
    if not isinstance(nights, int) or not 1 <= nights <= MAX_NIGHTS:
        raise ReportError(f"--nights must be a whole number from 1 to {MAX_NIGHTS}, got {nights!r}")
    side_a, side_b = side(by, a, "a"), side(by, b, "b")
    con = connect()
    try:
        files = ResultFiles.of(inputs.lake, con, inputs.results)

        def read() -> tuple[dict, dict]:
            files.register("results")
            return _side_samples(con, by, side_a, nights), _side_samples(con, by, side_b, nights)

        try:
            found_a, found_b = files.run(read)
        except Exception as exc:  # noqa: BLE001 - a column this lake does not have (worker_runtime)
            if "worker_runtime" in str(exc):
                raise ReportError("--by runtime: this lake's results have no worker_runtime column "
                                  "(records from before it existed)") from None
            raise
        for chosen, found in ((side_a, found_a), (side_b, found_b)):
            if not found:
                raise ReportError(f"--by {by}: nothing ran ok for {chosen.label!r}; "
                                  f"{by}s in the lake: {', '.join(available(con, by)) or 'none'}")
    finally:
        con.close()
    names = _key(by)
    rows = [_row(dict(zip(names, key, strict=True)), found_a[key], found_b[key], confidence)
            for key in sorted(set(found_a) & set(found_b), key=_sort_key)]
    mean = stats.geometric_mean([r["change"] + 1 for r in rows])
    summary = {name: None for name in (*names, *_row_fields())}
    summary.update(network="geomean", change=None if mean is None else mean - 1)
    return pa.Table.from_pylist([*rows, summary])


def _sort_key(key: tuple) -> tuple:
    return tuple((value is None, value if value is not None else 0) for value in key)


def _row_fields() -> tuple[str, ...]:
    return ("a_images_per_sec", "a_low", "a_high", "a_samples", "b_images_per_sec", "b_low", "b_high",
            "b_samples", "change", "change_low", "change_high", "p_value", "significant")


def available(con, by: str) -> list[str]:
    """The values ``--by`` could take in the lake (for error messages), at most 20."""
    column = {"machine": "provider || '/' || instance_type || coalesce('/' || region, '')",
              "night": 'CAST("date" AS VARCHAR)', "runtime": "worker_runtime"}[by]
    try:
        return [row[0] for row in con.execute(
            f"SELECT DISTINCT {column} AS v FROM results WHERE v IS NOT NULL ORDER BY v LIMIT 20"  # noqa: S608
        ).fetchall()]
    except Exception:  # noqa: BLE001 - no such column: nothing to offer
        return []


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f}%"


def _figure(median: float | None, low: float | None, high: float | None) -> str:
    if median is None:
        return ""
    if low is None or high is None:
        return f"{median:,.1f} ± ∞"
    spread = max(high - median, median - low) / median
    return f"{median:,.1f} ±{spread * 100:.0f}%"


def render(table: pa.Table, by: str, a: str, b: str) -> str:
    """benchstat-like text: one line per configuration, '~' where nothing is significant."""
    lines = [f"compare by {by}: A = {a}   B = {b}   (images/s: median ± 95 % interval; change B vs A)",
             f"{'configuration':<46} {'A':>16} {'B':>16} {'change':>8} {'95 % interval':>18}  p"]
    for row in table.to_pylist():
        if row["network"] == "geomean":
            lines.append(f"{'geomean':<46} {'':>16} {'':>16} {_percent(row['change']):>8}")
            continue
        name = f"{row['mode']} {row['network']} {row['dtype']} b{row['batch_size']} x{row['gpu_count']}"
        if by != "machine":
            name = f"{row['provider']}/{row['instance_type']} {name}"
        change = _percent(row["change"]) if row["significant"] else "~"
        interval = (f"[{_percent(row['change_low'])}, {_percent(row['change_high'])}]"
                    if row["change_low"] is not None else "")
        lines.append(f"{name:<46.46} {_figure(row['a_images_per_sec'], row['a_low'], row['a_high']):>16} "
                     f"{_figure(row['b_images_per_sec'], row['b_low'], row['b_high']):>16} {change:>8} "
                     f"{interval:>18}  p={row['p_value']:.3f} n={row['a_samples']}+{row['b_samples']}")
    measured = [r for r in table.to_pylist() if r["network"] != "geomean"]
    if any(r["a_low"] is None or r["b_low"] is None for r in measured):
        lines.append("± ∞: need >= 6 samples for a 95 % interval of the median")
    if any(not r["significant"] and stats.mann_whitney([1.0] * r["a_samples"], [2.0] * r["b_samples"]).p_value
           >= 1 - stats.CONFIDENCE for r in measured):
        lines.append("~ with few samples: these sample sizes cannot show a difference at 5 % "
                     "(one figure against one figure never can)")
    if not measured:
        lines.append("no configuration ran ok on both sides")
    return "\n".join(lines)

