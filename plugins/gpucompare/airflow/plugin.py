"""The Airflow plugin: a "GPU cost reports" entry in the UI that shows the latest report.

Airflow 3 plugins extend the API server with FastAPI apps and the UI with external views
(Flask views and ``appbuilder_menu_items`` are Airflow 2's way). This plugin

* mounts a small FastAPI app at ``/gpucompare`` on the API server that serves the local
  reports folder (``GPUCOMPARE_REPORTS``, default ``./reports``): ``/gpucompare/`` redirects
  to ``reports/latest/index.html``, or says how to build a first report;
* adds an external view to the navigation bar, rendered inside the Airflow UI (it has a
  ``url_route``), whose page is that app.

Plugin endpoints are not protected by Airflow by default; these require a logged-in user
(the UI's session cookie or an API token), like the rest of the UI. Anything odd in a path
(a NUL byte, an over-long name, a symlink loop, a dotfile, ``..``) is a 404, never a 500;
every answer carries ``X-Content-Type-Options: nosniff`` and a Content-Security-Policy
that lets a report use its own inline styles and files, and nothing else. Reports published to
S3 are not served here: the page then names the bucket to read them from (or from BI).

Airflow loads it through the installed package's ``airflow.plugins`` entry point
(pyproject.toml), from site-packages or an editable checkout; the plugins folder skips it
(``plugins/.airflowignore``).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from airflow.api_fastapi.core_api.security import requires_authenticated
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from gpucompare import settings
from gpucompare.reports.templating import environment

URL_PREFIX = "/gpucompare"
LATEST_PAGE = "reports/latest/index.html"
#: Longest relative path served (a report set is a few folders deep).
MAX_PATH_CHARS = 512
#: Reports are static HTML with inline CSS and SVG: no scripts, no foreign resources.
CONTENT_SECURITY_POLICY = ("default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                           "script-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
                           "frame-ancestors 'self'")
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": CONTENT_SECURITY_POLICY}

#: The plugin's own pages (templates/*.html.j2), autoescaped: a reports location is the
#: operator's text and is shown as text, whatever it holds.
_TEMPLATES = environment("gpucompare.airflow")


def no_report_page(location: str, *, remote: bool) -> str:
    """The page shown before the first report: where the reports are (or would be), and what to do."""
    return _TEMPLATES.get_template("no_report.html.j2").render(location=location, remote=remote)


def _reports_location(configured: str | None) -> str:
    return configured or settings.reports_uri()


def _plain_relative(relative: str) -> bool:
    """A path worth looking up: printable, not too long, no empty, dot or dotfile segment."""
    if not relative or len(relative) > MAX_PATH_CHARS or not relative.isprintable() or "\\" in relative:
        return False
    return not any(part.startswith(".") for part in PurePosixPath(relative).parts) \
        and not relative.startswith("/")


def _file_below(root: Path, relative: str) -> Path | None:
    """``root/relative`` if it is a file inside ``root`` (``latest`` may link to a sibling dated
    folder, which is inside too); None for anything else: ``..`` tricks, dotfiles, NUL bytes,
    over-long names, symlink loops and any other error of the file system."""
    if not _plain_relative(relative):
        return None
    try:
        base = root.resolve()
        candidate = (base / relative).resolve(strict=True)
        if candidate.is_dir():
            candidate = (candidate / "index.html").resolve(strict=True)
        if not candidate.is_relative_to(base) or not candidate.is_file():
            return None
        # the resolved file must not be a dotfile either (a link may point at one)
        if any(part.startswith(".") for part in candidate.relative_to(base).parts):
            return None
    except (OSError, RuntimeError, ValueError):  # ENAMETOOLONG, ELOOP, NUL, permission …
        return None
    return candidate


def create_app(reports_location: str | None = None) -> FastAPI:
    """The app serving ``reports_location`` (default: ``GPUCOMPARE_REPORTS``, read per request,
    so the folder may appear, or the setting change, after the server started)."""
    app = FastAPI(title="gpucompare reports", dependencies=[Depends(requires_authenticated())])

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Response:
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.get("/", response_model=None)
    def latest_report() -> Response:
        location = _reports_location(reports_location)
        if settings.is_remote(location):
            return HTMLResponse(no_report_page(location, remote=True))
        if _file_below(Path(location), "latest/index.html") is None:
            return HTMLResponse(no_report_page(location, remote=False), status_code=404)
        # relative, so it works behind a proxy that moves Airflow under a path prefix
        return RedirectResponse(LATEST_PAGE, status_code=307)

    @app.get("/reports/{relative:path}", response_model=None)
    def report_file(relative: str) -> Response:
        location = _reports_location(reports_location)
        found = None if settings.is_remote(location) else _file_below(Path(location), relative)
        if found is None:
            raise HTTPException(status_code=404, detail=f"no report file {relative!r}")
        return FileResponse(found)

    return app


class GpuComparePlugin(AirflowPlugin):
    """Registers the reports app and the navigation entry."""

    name = "gpucompare"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "gpucompare reports"}]
    external_views = [{
        "name": "GPU cost reports",
        # no leading slash: relative to the UI's base URL
        "href": f"{URL_PREFIX.lstrip('/')}/",
        "destination": "nav",
        "url_route": "gpucompare-reports",
        "category": "browse",
    }]
