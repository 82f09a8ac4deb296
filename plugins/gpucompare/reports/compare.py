"""The ``compare`` report: two machines, two nights or two worker runtimes side by side per
configuration, in the spirit of Go's benchstat.

For each configuration (mode, network, dtype, batch size, GPUs, nodes, device kind, kvstore,
methodology; for nights and runtimes also the machine) measured on both sides: each side's
median throughput with its 95 % interval (:func:`stats.median_interval`), the change B / A - 1
with the interval of the ratio (:func:`stats.ratio_interval`, Hodges-Lehmann) and the
Mann-Whitney U test's p-value; where the test finds no significant difference (p >= 1 -
confidence) the change prints as ``~``, as benchstat does. A configuration measured on one side
only (another batch size, a network the other did not run) is shown too, the other side empty
(``present``: ``A only`` | ``B only``), and the text says "configuration sets differ"; where no
configuration is on both sides it says which parts of the configuration the sides never share
(a CPU machine and a GPU machine differ in ``device_kind``). A side with one sample, or with
identical samples (zero variance), gets no interval and a ``note`` saying so. The last row is the
geometric mean of the ratios of the configurations on both sides (benchstat's "geomean"),
whatever their significance; its ``note`` says how many of all configurations it covers.

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
from gpucompare.reports import stats
from gpucompare.reports.inputs import ReportInputs, ResultFiles, connect
from gpucompare.reports.report_set import MAX_NIGHTS, ReportError

#: what a side of a comparison may be
COMPARE_BY: tuple[str, ...] = ("machine", "night", "runtime")
CONFIG_KEY: tuple[str, ...] = ("mode", "network", "dtype", "batch_size", "gpu_count", "num_nodes",
                               "device_kind", "kvstore", "methodology")
MACHINE_KEY: tuple[str, ...] = ("provider", "instance_type", "region", "market")
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


def _spread_note(label: str, samples: list[float]) -> str | None:
    """Why a side has no interval though it has samples, or None."""
    if len(samples) == 1:
        return f"{label}: 1 sample, no interval"
    if len(set(samples)) == 1:
        return f"{label}: {len(samples)} identical samples (zero variance), no interval"
    return None


def _side_fields(prefix: str, samples: list[float] | None, confidence: float) -> dict:
    if not samples:
        return {f"{prefix}_images_per_sec": None, f"{prefix}_low": None, f"{prefix}_high": None,
                f"{prefix}_samples": None}
    # identical samples give a zero-width order-statistic interval: a claim the data cannot make
    interval = None if len(set(samples)) == 1 else stats.median_interval(samples, confidence)
    return {f"{prefix}_images_per_sec": statistics.median(samples),
            f"{prefix}_low": interval.low if interval else None,
            f"{prefix}_high": interval.high if interval else None, f"{prefix}_samples": len(samples)}


def _row(key: dict, a: list[float] | None, b: list[float] | None, confidence: float) -> dict:
    """One configuration; a side it was not measured on (``None``) stays empty."""
    row = {**key, **_side_fields("a", a, confidence), **_side_fields("b", b, confidence),
           "present": "both" if a and b else ("A only" if a else "B only"),
           "change": None, "change_low": None, "change_high": None, "p_value": None, "significant": None}
    notes = [n for n in (_spread_note("A", a) if a else None, _spread_note("B", b) if b else None) if n]
    if a and b:
        test = stats.mann_whitney(a, b)
        both_flat = len(set(a)) == 1 and len(set(b)) == 1  # every pairwise ratio equal: no interval
        ratio = None if both_flat else stats.ratio_interval(a, b, confidence)
        row.update(change=statistics.median(b) / statistics.median(a) - 1,
                   change_low=ratio.low - 1 if ratio else None, change_high=ratio.high - 1 if ratio else None,
                   p_value=test.p_value, significant=test.significant(confidence))
    row["note"] = "; ".join(notes) or None
    return row


def compare(inputs: ReportInputs, by: str, a: str, b: str, *, nights: int = 1,
            confidence: float = stats.CONFIDENCE) -> pa.Table:
    """The comparison table of side ``a`` against side ``b`` (see the module doc): every
    configuration of either side (``present``: both, A only, B only); the last row, network
    ``geomean``, is the geometric mean of the ratios of the configurations on both sides, its
    ``note`` saying how many of all it covers."""
    if not isinstance(nights, int) or not 1 <= nights <= MAX_NIGHTS:
        raise ReportError(f"--nights must be a whole number from 1 to {MAX_NIGHTS}, got {nights!r}")
    side_a, side_b = side(by, a, "a"), side(by, b, "b")
    found_a, found_b = _read_sides(inputs, by, side_a, side_b, nights)
    names = _key(by)
    rows = [_row(dict(zip(names, key, strict=True)), found_a.get(key), found_b.get(key), confidence)
            for key in sorted(set(found_a) | set(found_b), key=_sort_key)]
    both = [r for r in rows if r["present"] == "both"]
    mean = stats.geometric_mean([r["change"] + 1 for r in both])
    summary = {name: None for name in (*names, *_row_fields())}
    summary.update(network="geomean", change=None if mean is None else mean - 1,
                   note=f"over {len(both)} of {len(rows)} configurations (those measured on both sides)")
    return pa.Table.from_pylist([*rows, summary], schema=_schema(names))


#: the configuration columns that are whole numbers; the others are text
_INT_KEYS = ("batch_size", "gpu_count", "num_nodes")


def _schema(names: tuple[str, ...]) -> pa.Schema:
    """Typed columns, so a column empty on every row (a one-sided comparison) keeps its type."""
    types = {"a_samples": pa.int64(), "b_samples": pa.int64(), "present": pa.string(),
             "significant": pa.bool_(), "note": pa.string()}
    keys = [pa.field(n, pa.int64() if n in _INT_KEYS else pa.string()) for n in names]
    return pa.schema([*keys, *(pa.field(n, types.get(n, pa.float64())) for n in _row_fields())])


def _read_sides(inputs: ReportInputs, by: str, side_a: Side, side_b: Side,
                nights: int) -> tuple[dict, dict]:
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
    return found_a, found_b


def _sort_key(key: tuple) -> tuple:
    return tuple((value is None, value if value is not None else 0) for value in key)


def _row_fields() -> tuple[str, ...]:
    return ("a_images_per_sec", "a_low", "a_high", "a_samples", "b_images_per_sec", "b_low", "b_high",
            "b_samples", "present", "change", "change_low", "change_high", "p_value", "significant", "note")


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


def _figure(median: float | None, low: float | None, high: float | None, samples: int | None = None,
            flat: bool = False) -> str:
    if median is None:
        return ""
    if samples == 1:
        return f"{median:,.1f} (1 run)"
    if flat:
        return f"{median:,.1f} (all equal)"
    if low is None or high is None:
        return f"{median:,.1f} ± ∞"
    spread = max(high - median, median - low) / median
    return f"{median:,.1f} ±{spread * 100:.0f}%"


def _name(row: dict, by: str) -> str:
    name = f"{row['mode']} {row['network']} {row['dtype']} b{row['batch_size']} x{row['gpu_count']}"
    if row["device_kind"] == "cpu":
        name += " cpu"
    return name if by == "machine" else f"{row['provider']}/{row['instance_type']} {name}"


def _flat(row: dict, side: str) -> bool:
    """Whether that side's samples are all equal (its note says so)."""
    return f"{side.upper()}: {row[f'{side}_samples']} identical" in (row["note"] or "")


def _line(row: dict, by: str) -> str:
    a, b = (_figure(row[f"{s}_images_per_sec"], row[f"{s}_low"], row[f"{s}_high"], row[f"{s}_samples"],
                    _flat(row, s)) for s in "ab")
    if row["present"] != "both":
        return f"{_name(row, by):<46.46} {a:>16} {b:>16} {'':>8} {'':>18}  {row['present']}"
    change = _percent(row["change"]) if row["significant"] else "~"
    interval = (f"[{_percent(row['change_low'])}, {_percent(row['change_high'])}]"
                if row["change_low"] is not None else "")
    return (f"{_name(row, by):<46.46} {a:>16} {b:>16} {change:>8} {interval:>18}  "
            f"p={row['p_value']:.3f} n={row['a_samples']}+{row['b_samples']}")


def _values(rows: list[dict], field: str, present: str) -> set:
    return {r[field] for r in rows if r["present"] in (present, "both")}


def _why_none_match(rows: list[dict], names: tuple[str, ...]) -> str:
    """Which parts of the configuration the two sides never share."""
    apart = []
    for field in names:
        a, b = _values(rows, field, "A only"), _values(rows, field, "B only")
        if a.isdisjoint(b):
            show = lambda values: ", ".join(sorted(str(v) for v in values))  # noqa: E731
            apart.append(f"{field} (A: {show(a)}; B: {show(b)})")
    text = "no configuration was measured on both sides"
    if apart:
        text += ": they never share " + ", ".join(apart)
    kinds = (_values(rows, "device_kind", "A only"), _values(rows, "device_kind", "B only"))
    if "device_kind" in names and kinds[0] != kinds[1]:
        text += ("; a CPU machine and a GPU machine never run the same configuration (the device is part "
                 "of it): compare each with a machine of its own kind")
    return text


def _notes(measured: list[dict], names: tuple[str, ...]) -> list[str]:
    both = [r for r in measured if r["present"] == "both"]
    notes = []
    one_sided = {p: sum(r["present"] == p for r in measured) for p in ("A only", "B only")}
    if any(one_sided.values()):
        notes.append(f"configuration sets differ: {one_sided['A only']} on A only, {one_sided['B only']} "
                     f"on B only (shown with the other side empty); the geomean covers only the "
                     f"{len(both)} on both sides")
    batches = {p: sorted(_values(measured, "batch_size", p)) for p in ("A only", "B only")}
    if batches["A only"] != batches["B only"]:
        notes.append(f"batch sizes differ: A ran {', '.join(map(str, batches['A only']))}; "
                     f"B ran {', '.join(map(str, batches['B only']))}")
    if not both:
        notes.append(_why_none_match(measured, names))
    return notes


def _footnotes(measured: list[dict]) -> list[str]:
    both = [r for r in measured if r["present"] == "both"]
    lines = []
    short = [r for r in measured if any(r[f"{s}_samples"] and 1 < r[f"{s}_samples"] < 6
                                        and r[f"{s}_low"] is None and not _flat(r, s) for s in "ab")]
    if short:
        lines.append("± ∞: need >= 6 samples for a 95 % interval of the median")
    spread = sorted({n for r in measured for n in (r["note"] or "").split("; ") if n})
    lines.extend(spread)
    few = sorted({(r["a_samples"], r["b_samples"]) for r in both if not r["significant"]
                  and stats.min_p_value(r["a_samples"], r["b_samples"]) >= 1 - stats.CONFIDENCE})
    if few:
        sizes = ", ".join(f"{a}+{b} (smallest p {stats.min_p_value(a, b):.2f})" for a, b in few)
        lines.append(f"~ with few samples: n={sizes} cannot show a difference at 5 % whatever the figures")
    return lines


def render(table: pa.Table, by: str, a: str, b: str) -> str:
    """benchstat-like text: one line per configuration, '~' where nothing is significant, the
    other side empty where a configuration ran on one side only, then notes and footnotes."""
    lines = [f"compare by {by}: A = {a}   B = {b}   (images/s: median ± 95 % interval; change B vs A)",
             f"{'configuration':<46} {'A':>16} {'B':>16} {'change':>8} {'95 % interval':>18}  p"]
    rows = table.to_pylist()
    measured = [r for r in rows if r["network"] != "geomean"]
    summary = next(r for r in rows if r["network"] == "geomean")
    lines.extend(_line(row, by) for row in measured)
    lines.append(f"{'geomean':<46} {'':>16} {'':>16} {_percent(summary['change']):>8}  {summary['note']}")
    names = tuple(n for n in table.column_names if n not in _row_fields())
    return "\n".join([*lines, *_notes(measured, names), *_footnotes(measured)])
