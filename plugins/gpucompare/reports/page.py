"""The human side of the reports: one self-contained ``index.html`` from Jinja2 templates.

Python prepares, templates draw: :func:`render_page` turns the report set into its view once
(:func:`gpucompare.reports.page_view.build_page_view`: every figure already text, every section's
data complete), then renders ``templates/page.html.j2`` with autoescape on, so no text from the
lake reaches the page unescaped. No I/O and no clock: :func:`render_page` takes the time it
states as an argument; :mod:`gpucompare.reports.publish` writes the result. ``summary.md`` is
:mod:`gpucompare.reports.summary`.

The page needs no network to be viewed: its style sheet is inline and every chart an inline SVG
(text stays text). What a reader can rely on, on every chart:

* a key of measured vs published figures drawn in the chart itself, and channels besides colour:
  measured bars solid and published ones hatched; every line its own dash and marker (filled for
  measured, hollow for published), numbered at its end and in the legend; the ideal line dotted;
* charts scale to their box (``viewBox``) and a measured line never lies on the axis (log scale
  when it would);
* one colour per machine (provider and instance type) across the whole page, and the provider
  with every machine name;
* the date of every figure (measured night or publication year) and, for money, the date of the
  price (and 'declared' for a price the user declared);
* a heading naming network, mode and batch size, a text summary that counts what is drawn, and
  the chart's numbers as a table (collapsed in ``<details>``); each section links its files.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from gpucompare.reports.page_view import build_page_view
from gpucompare.reports.report_set import ReportSet
from gpucompare.reports.templating import environment

_ENVIRONMENT = environment("gpucompare.reports")


def render_page(report_set: ReportSet, generated_at: dt.datetime) -> str:
    """The whole index.html as a string; ``generated_at`` is the time the page states. A part that
    cannot be drawn never stops the page: it says so in its place, and the page lists every failed
    part of the report set at its top."""
    view = build_page_view(report_set, generated_at)
    fields = {f.name: getattr(view, f.name) for f in dataclasses.fields(view)}
    return _ENVIRONMENT.get_template("page.html.j2").render(fields)


def render_chart(model: Any) -> str:
    """One chart model (:mod:`gpucompare.reports.charts`) as the SVG the page holds."""
    return str(_ENVIRONMENT.get_template("charts.html.j2").module.chart(model))
