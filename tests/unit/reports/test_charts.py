"""The page's chart model (gpucompare.reports.charts) and its template, with every kind of value a
lake can hold: zero, tiny (1e-100), huge (1e13, 1e300), NaN, ±inf and None. A value that cannot be
drawn is listed as such; nothing raises, and every coordinate drawn is finite and inside the chart."""

from __future__ import annotations

import math
import re

import pytest

from gpucompare.reports import charts
from gpucompare.reports.charts import VIEW_WIDTH, Bar, Series, bar_chart, line_chart, line_styles, nice_ticks
from gpucompare.reports.page import render_chart

NAN, INF = float("nan"), float("inf")
ODD = (0.0, 1e-100, 1e13, NAN, INF, -INF, -1.0, None, 1e300, 1e-320)


def _numbers(svg: str) -> list[float]:
    """Every coordinate-like attribute value of the SVG."""
    values = re.findall(r'\b(?:x|y|x1|x2|y1|y2|cx|cy|width|height)="([^"]+)"', svg)
    paths = re.findall(r'\bd="([^"]+)"', svg)
    values += [v for path in paths for v in re.findall(r"-?[\d.]+(?:e-?\d+)?", path)]
    return [float(v) for v in values]


def _inside(svg: str, width: float, height: float) -> None:
    assert "nan" not in svg.lower().replace("not a number", "") and "inf" not in svg.lower().replace(
        "infinite", "")
    for value in _numbers(svg):
        assert math.isfinite(value) and -1 <= value <= max(width, height) + 1, value


def test_ticks_are_round_and_cover_the_range():
    assert nice_ticks(0, 0.37) == pytest.approx([0, 0.1, 0.2, 0.3, 0.4])
    assert nice_ticks(0, 1234) == [0, 250, 500, 750, 1000, 1250]
    assert nice_ticks(0, 0) == pytest.approx([0, 0.2])  # a flat series still gets an axis


@pytest.mark.parametrize("high", [1e-100, 3e-7, 1e13, 1e300])
def test_ticks_of_tiny_and_huge_axes_are_distinct_finite_and_cover_the_top(high):
    ticks = nice_ticks(0, high)
    assert ticks[-1] >= high and all(math.isfinite(t) for t in ticks)
    assert len(set(ticks)) == len(ticks) >= 2  # never rounded to one value (the old ZeroDivisionError)


def test_drawable_names_the_reason():
    assert [charts.drawable(v) for v in ODD] == [
        "", "", "", "not a number", "infinite", "infinite", "negative", "no value", "", "too small to draw"]


@pytest.mark.parametrize("only", ODD)
def test_a_bar_chart_of_any_single_value_renders(only):
    chart = bar_chart("c", [Bar("m", only, "#123456", "text")], "€")
    svg = render_chart(chart)
    assert svg.startswith("<svg") and f'viewBox="0 0 {VIEW_WIDTH} ' in svg
    _inside(svg, chart.width, chart.height)
    assert len(chart.bars) + len(chart.undrawn) == 1
    assert bool(chart.undrawn) == bool(charts.drawable(only))


def test_a_bar_chart_of_every_odd_value_draws_the_drawable_and_lists_the_rest():
    chart = bar_chart("c", [Bar(f"m{i}", v, "#123456", f"v{i}") for i, v in enumerate(ODD)], "€")
    assert [b.label.text for b in chart.bars] == ["m0", "m1", "m2", "m8"]
    assert chart.undrawn == ["m3: v3 (not a number)", "m4: v4 (infinite)", "m5: v5 (infinite)",
                             "m6: v6 (negative)", "m7: v7 (no value)", "m9: v9 (too small to draw)"]
    svg = render_chart(chart)
    _inside(svg, chart.width, chart.height)
    widths = [b.width for b in chart.bars]
    assert widths[0] == widths[1] == 1.0 and widths[3] == pytest.approx(max(widths))  # 0 and tiny: a sliver


@pytest.mark.parametrize("value", ODD)
def test_a_line_chart_of_any_value_renders(value):
    series = [Series("a", [(1, value), (2, 10.0)], "#123456"),
              Series("b", [(1, value)], "#654321", "published")]
    for log2_x in (False, True):
        chart = line_chart("c", series, "x", "y", log2_x=log2_x)
        svg = render_chart(chart)
        _inside(svg, chart.width, chart.height)
        drawn = sum(len(line.points) for line in chart.lines)
        assert drawn + len(chart.undrawn) == 3


def test_odd_x_values_are_listed_not_drawn():
    chart = line_chart("c", [Series("a", [(0, 1.0), (NAN, 2.0), (INF, 3.0), (4, 4.0)], "#123456")],
                       "batch", "images/s", log2_x=True)
    assert len(chart.lines[0].points) == 1
    assert [u.split("(")[-1] for u in chart.undrawn] == ["zero on a log scale)", "not a number)", "infinite)"]


def test_a_measured_cpu_line_on_a_6000_chart_is_lifted_off_the_axis():
    """60 images/s measured beside published GPUs at 6,000: the chart changes to a log scale and the
    measured points stand well above the axis (on a linear scale they would be 2 px above it)."""
    cpu = Series("local cpu", [(1, 38.0), (2, 60.0)], "#111111")
    gpus = [Series(f"gpu {i}", [(1, 800.0 * i), (32, 6000.0 / i)], "#222222", "published") for i in (1, 2)]
    chart = line_chart("t", [cpu, *gpus], "batch", "images/s", log2_x=True)
    assert chart.log_y and chart.y_label.text == "images/s (log scale)"
    lowest = min(chart.plot_bottom - p.y for p in chart.lines[0].points)
    assert lowest >= charts.MIN_LIFT_PX
    # a chart whose lines are all of one size keeps its linear axis from 0
    assert not line_chart("t", gpus, "batch", "images/s", log2_x=True).log_y


def test_every_line_of_a_chart_has_its_own_dash_and_marker_pair():
    styles = line_styles([False] * 12 + [True] * 12)
    pairs = [(s.dash, s.marker, s.filled) for s in styles]
    assert len(set(pairs)) == 24
    assert all(s.filled for s in styles[:12]) and not any(s.filled for s in styles[12:])
    # consecutive lines (a machine's strong and weak series) differ in both
    for first, second in zip(styles, styles[1:12], strict=False):
        assert first.dash != second.dash and first.marker != second.marker


def test_strong_and_weak_series_are_numbered_and_tagged_at_their_end():
    ideal = Series("ideal (linear)", [(1, 1), (4, 4)], "#999999", "ideal")
    strong = Series("box strong", [(1, 1.0), (4, 2.3)], "#d35400", tag="strong")
    weak = Series("box weak", [(1, 1.0), (4, 3.14)], "#d35400", tag="weak")
    chart = line_chart("s", [ideal, strong, weak], "GPUs", "speedup")
    ends = {line.label: line.end.text for line in chart.lines if line.end}
    assert ends == {"box strong": "1 strong", "box weak": "2 weak"}
    svg = render_chart(chart)
    entries = re.findall(r'<g class="legend-entry" data-dash="([^"]*)" data-marker="([^"]*)"', svg)
    assert len(entries) == 3 and len(set(entries)) == 3


def test_intervals_draw_error_bars_and_odd_bounds_are_skipped():
    bars = bar_chart("b", [Bar("a", 2.0, "#111111", "2", low=1.5, high=2.5),
                           Bar("b", 3.0, "#111111", "3", low=NAN, high=4.0)], "€")
    assert bars.bars[0].error is not None and bars.bars[1].error is None
    assert bars.bars[0].error[0] < bars.bars[0].x + bars.bars[0].width < bars.bars[0].error[1]
    lines = line_chart("l", [Series("a", [(1, 10.0), (2, 20.0)], "#111111",
                                    intervals={1: (9.0, 11.0), 2: (None, 25.0)})], "x", "y")
    errors = [p.error for p in lines.lines[0].points]
    assert errors[0] is not None and errors[1] is None
    assert render_chart(bars).count('class="error-bar"') == 1
    assert render_chart(lines).count('class="error-bar"') == 1


def test_text_in_a_chart_is_escaped():
    bars = [Bar("<script>x</script>", 1.0, "#111111", "1 & 2", note="a\"b")]
    svg = render_chart(bar_chart("c", bars, "<€>", title="<t>"))
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "1 &amp; 2" in svg and "&lt;€&gt;" in svg


def test_lines_of_one_colour_never_share_a_marker():
    """Five published series where the first and the fifth are one machine's (one colour): by the
    counter alone both would get a hollow circle and differ by dash only."""
    colours = ["#111111", "#222222", "#333333", "#444444", "#111111"]
    styles = line_styles([True] * 5, colours)
    same = [s.marker for s, c in zip(styles, colours, strict=True) if c == "#111111"]
    assert len(set(same)) == 2, styles


def test_a_declared_price_label_says_declared_once():
    from gpucompare.reports.formatting import price_label

    row = {"price_source": "declared", "price_effective_from": "2026-12-01",
           "price_note": "declared: example price for this demo machine (25 EUR per month)"}
    assert price_label(row).count("declared") == 1, price_label(row)
    assert price_label(row).endswith("declared: example price for this demo machine (25 EUR per month)")
