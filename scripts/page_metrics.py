"""The report page measured in headless Chromium: page height at 390 and 1366 px, and a PNG
of the first screen at each width (for the closing note; not a test: no bounds asserted).

    .venv/bin/python scripts/page_metrics.py OUT_DIR [--site SITE_DIR]

Without ``--site`` it builds the demo-like site of tests/support/page_site.py into OUT_DIR/site
(two nights of the unpriced local CPU, the published figures, the catalog samples);
``--fresh`` builds a fresh install's site instead (the reference data only, nothing measured).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
WIDTHS = (390, 1366)


def measure(site: Path, out: Path) -> dict[int, dict[str, float]]:
    from playwright.sync_api import sync_playwright

    found: dict[int, dict[str, float]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for width in WIDTHS:
                page = browser.new_page(viewport={"width": width, "height": 844 if width == 390 else 768})
                page.goto((site / "index.html").as_uri(), wait_until="load")
                found[width] = page.evaluate(
                    """() => ({height: document.documentElement.scrollHeight,
                               width: document.documentElement.scrollWidth,
                               sections: Object.fromEntries([...document.querySelectorAll('section')]
                                   .map(s => [s.id, Math.round(s.getBoundingClientRect().height)]))})"""
                )
                page.screenshot(path=str(out / f"first-screen-{width}.png"))
                page.close()
        finally:
            browser.close()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--site", type=Path)
    parser.add_argument("--fresh", action="store_true", help="a fresh install: nothing measured yet")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    site = args.site
    if site is None:
        from tests.support.page_site import demo_site

        _report_set, site = demo_site(args.out, measured=not args.fresh)
    for width, figures in measure(site, args.out).items():
        print(f"{width} px: page height {figures['height']} px, scroll width {figures['width']} px")
        for section, height in figures["sections"].items():
            print(f"    {section:<14} {height:>7} px")
    print(f"screenshots: {args.out}/first-screen-*.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
