"""The one Jinja2 environment of the project's HTML: the report page's templates
(``gpucompare.reports``) and the Airflow plugin's pages (``gpucompare.airflow``) are drawn
alike: autoescaped (text from the lake or the settings is text, whatever it holds), an undefined
name an error (``StrictUndefined``), block tags without the blank lines they stand on; ``coord(v)``
writes an SVG coordinate with one decimal (a function, not a macro: a chart calls it thousands of
times).
"""

from __future__ import annotations

import jinja2

#: An SVG coordinate or length as the charts write it, one decimal: ``coord(12.345)`` is
#: ``'12.3'`` (a bound method of a string: the templates call no project code while they render).
coord = "{:.1f}".format


def environment(package: str, folder: str = "templates") -> jinja2.Environment:
    """The environment of the templates in ``package``'s ``folder``."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(package, folder),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["coord"] = coord
    return env
