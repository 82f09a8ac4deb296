"""The Airflow plugin in Airflow's real API app: a nav entry, and the latest report behind a login."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def api(airflow_db: Path) -> Any:
    """Airflow's API server app (create_app: core API, UI, auth manager, plugins), in-process."""
    from airflow.api_fastapi.app import create_app
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    app = create_app()
    token = app.state.auth_manager.generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
    return TestClient(app), {"Authorization": f"Bearer {token}"}


@pytest.fixture
def reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "reports"
    (root / "2026-11-29").mkdir(parents=True)
    (root / "2026-11-29" / "index.html").write_text("<html>old night</html>")
    (root / "2026-11-30" / "cost_per_million").mkdir(parents=True)
    (root / "2026-11-30" / "index.html").write_text("<html>cost per million</html>")
    (root / "2026-11-30" / "cost_per_million.csv").write_text("provider,cost_per_million\n")
    (root / "latest").symlink_to("2026-11-30", target_is_directory=True)
    (tmp_path / "secret.txt").write_text("not a report")
    monkeypatch.setenv("GPUCOMPARE_REPORTS", str(root))
    return root


def test_the_ui_lists_the_reports_link(api: Any) -> None:
    client, auth = api
    plugins = client.get("/api/v2/plugins", headers=auth).json()["plugins"]
    ours = next(p for p in plugins if p["name"] == "gpucompare")
    assert ours["external_views"][0]["href"] == "gpucompare/"
    assert ours["external_views"][0]["destination"] == "nav"
    assert ours["fastapi_apps"][0]["url_prefix"] == "/gpucompare"


def test_latest_report_is_served_to_logged_in_users_only(api: Any, reports: Path) -> None:
    client, auth = api
    assert client.get("/gpucompare/", follow_redirects=False).status_code == 401
    assert client.get("/gpucompare/reports/latest/index.html").status_code == 401

    redirect = client.get("/gpucompare/", headers=auth, follow_redirects=False)
    assert redirect.status_code == 307 and redirect.headers["location"] == "reports/latest/index.html"
    page = client.get("/gpucompare/reports/latest/index.html", headers=auth)
    assert page.status_code == 200 and page.text == "<html>cost per million</html>"
    assert client.get("/gpucompare/reports/latest/", headers=auth).text == "<html>cost per million</html>"
    older = client.get("/gpucompare/reports/2026-11-29/index.html", headers=auth)
    assert older.text == "<html>old night</html>"
    csv = client.get("/gpucompare/reports/latest/cost_per_million.csv", headers=auth)
    assert csv.status_code == 200 and csv.text.startswith("provider")


def test_nothing_outside_the_reports_folder_is_served(api: Any, reports: Path) -> None:
    client, auth = api
    for path in ("/gpucompare/reports/..%2Fsecret.txt", "/gpucompare/reports/latest/..%2F..%2Fsecret.txt",
                 "/gpucompare/reports/%2Fetc%2Fpasswd", "/gpucompare/reports/missing.html"):
        response = client.get(path, headers=auth)
        assert response.status_code == 404, path
        assert "not a report" not in response.text


def test_before_the_first_report_the_page_says_what_to_do(api: Any, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    client, auth = api
    monkeypatch.setenv("GPUCOMPARE_REPORTS", str(tmp_path / "nothing-yet"))
    response = client.get("/gpucompare/", headers=auth, follow_redirects=False)
    assert response.status_code == 404
    assert "gpucompare_nightly" in response.text and "No report yet" in response.text


@pytest.mark.parametrize("remote", [False, True])
def test_a_reports_location_is_shown_as_text_never_as_markup(api: Any, tmp_path: Path, remote: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The location is the operator's text: one holding markup (``<script>``, a quote, ``&``)
    is escaped in the page, on object storage and on disk alike."""
    client, auth = api
    odd = '<script>alert("x")</script>&<img src=x onerror=alert(1)>'
    location = f"s3://bucket/{odd}" if remote else str(tmp_path / odd)
    monkeypatch.setenv("GPUCOMPARE_REPORTS", location)
    response = client.get("/gpucompare/", headers=auth, follow_redirects=False)
    assert response.status_code == (200 if remote else 404)
    assert "<script>" not in response.text and "<img" not in response.text
    escaped = "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;&lt;img src=x onerror=alert(1)&gt;"
    assert escaped in response.text
    assert ("object storage" in response.text) is remote and "No report yet" in response.text


def test_odd_paths_are_404_never_500_and_every_answer_has_the_security_headers(api: Any,
                                                                              reports: Path) -> None:
    """Hostile paths: a NUL byte, a 5,000-character name, a symlink loop, dotfiles (also behind a
    link), a backslash; each is a 404 (never a 500, never the file), and every answer, good or
    not, carries nosniff and the Content-Security-Policy."""
    client, auth = api
    (reports / "loop").symlink_to("loop")
    (reports / "2026-11-30" / ".env").write_text("SECRET=1")
    (reports / "2026-11-30" / "dotlink.html").symlink_to(".env")
    paths = ["/gpucompare/reports/latest/index.html%00.csv", "/gpucompare/reports/%00",
             "/gpucompare/reports/" + "a" * 5000, "/gpucompare/reports/latest/" + "b" * 300 + "/" + "c" * 300,
             "/gpucompare/reports/loop", "/gpucompare/reports/loop/index.html",
             "/gpucompare/reports/latest/.env", "/gpucompare/reports/2026-11-30/.env",
             "/gpucompare/reports/latest/dotlink.html", "/gpucompare/reports/latest%5Cindex.html"]
    for path in paths:
        response = client.get(path, headers=auth)
        assert response.status_code == 404, (path[:80], response.status_code)
        assert "SECRET" not in response.text
        assert response.headers.get("x-content-type-options") == "nosniff", path[:80]
        assert "default-src 'self'" in response.headers["content-security-policy"]
    # a newline never reaches the plugin: Starlette's mount does not match it, Airflow answers 404
    assert client.get("/gpucompare/reports/latest/%0Aindex.html", headers=auth).status_code == 404
    page = client.get("/gpucompare/reports/latest/index.html", headers=auth)
    assert page.status_code == 200 and page.headers["x-content-type-options"] == "nosniff"
    assert "frame-ancestors 'self'" in page.headers["content-security-policy"]
    assert client.get("/gpucompare/reports/latest/index.html").headers["x-content-type-options"] == "nosniff"
