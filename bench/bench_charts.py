"""The first chart page of a session in a real browser (target: drawn in ≤ 500 ms).

Run: `.venv/bin/python bench/bench_charts.py`. Prints one JSON line; `run()` returns the same
dict for run_all.py.

A fresh demo site (SQLite) served as `manage.py up` serves it: gunicorn, static files
collected with hashed names and compressed by WhiteNoise. Debian's Chromium (headless, via
Playwright) logs in as the finance account once; then each repeat opens a new browser
context with that session's cookie but an empty cache (a first visit's cost: the chart
library is fetched and parsed) and loads the usage page, whose three charts are drawn by
plotly.js. Measured in the page: from the navigation's start to the moment every chart has
its SVG. The floor, in the same run and the same way: the task list, a page of the same
layout without charts, to its `load` event. The median of the repeats of each.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

TARGET_MS = 500
REPEATS = 7
COMMAND = ".venv/bin/python bench/bench_charts.py"
CHROMIUM = "/usr/bin/chromium"
DRAWN = """() => {
  const charts = [...document.querySelectorAll('[data-figure]')];
  return charts.length > 0 && charts.every(el => el.querySelector('.main-svg'));
}"""


def _measure(browser, state: dict, url: str, *, charts: bool, library: bytes | None = None):
    """(ms to drawn or loaded, ms until the server's answer had arrived)."""
    context = browser.new_context(storage_state=state)
    try:
        page = context.new_page()
        if library is not None:  # the same page with another build of plotly.js
            page.route(
                "**/plotly*.js",
                lambda route: route.fulfill(body=library, content_type="text/javascript"),
            )
        page.goto(url, wait_until="load")
        if charts:
            page.wait_for_function(DRAWN, timeout=30_000)
            done = page.evaluate("performance.now()")
        else:
            done = page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
        answered = page.evaluate("performance.getEntriesByType('navigation')[0].responseEnd")
        return done, answered
    finally:
        context.close()


def _full_bundle() -> bytes | None:
    """plotly.js's full bundle where the plotly Python package that ships it is installed
    (it is not a dependency: only for this comparison)."""
    try:
        import plotly
    except ImportError:
        return None
    return (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()


def run() -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    var_dir = c.fresh_var_dir("charts")
    env = c.django_env(var_dir, SWITCHYARD_STATIC_MANIFEST="1")
    c.prepare_site(env)
    c.manage(env, "collectstatic", "--noinput", "-v", "0", timeout=300)
    port = c.free_port()
    web = c.start(c.gunicorn_argv(port), env, var_dir / "web.log")
    try:
        c.wait_until(lambda: c.http_ready(port), timeout=60, what="the web server", procs=[web])
        base = f"http://{c.HOST}:{port}"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            login = browser.new_context()
            page = login.new_page()
            page.goto(f"{base}/login/")
            page.fill("input[name=username]", "finn")
            page.fill("input[name=password]", "finn-demo-pass")
            page.click("button[type=submit], input[type=submit]")
            page.wait_for_load_state("load")
            state = login.storage_state()
            login.close()
            full = _full_bundle()
            usage = f"{base}/usage/"
            # One unmeasured visit of each: gunicorn's workers import and warm up.
            _measure(browser, state, usage, charts=True)
            _measure(browser, state, f"{base}/", charts=False)
            charts, served, floor, with_full = [], [], [], []
            for _ in range(REPEATS):
                drawn, answered = _measure(browser, state, usage, charts=True)
                charts.append(drawn)
                served.append(answered)
                floor.append(_measure(browser, state, f"{base}/", charts=False)[0])
                if full is not None:
                    with_full.append(_measure(browser, state, usage, charts=True, library=full)[0])
            browser.close()
    finally:
        c.stop(web)
        c.remove_var_dir(var_dir)
    chart_ms, floor_ms = statistics.median(charts), statistics.median(floor)
    library = next(Path(c.ROOT, "static", "vendor").glob("plotly*.min.js"))
    return {
        "bench": "charts",
        "first_chart_page_ms": round(chart_ms),
        "page_answered_ms": round(statistics.median(served)),
        "floor_page_ms": round(floor_ms),
        "ratio": round(chart_ms / floor_ms, 2) if floor_ms else None,
        "full_bundle_ms": round(statistics.median(with_full)) if with_full else None,
        "runs_chart_ms": [round(x) for x in charts],
        "runs_floor_ms": [round(x) for x in floor],
        "library": library.name,
        "library_bytes": library.stat().st_size,
        "target_ms": TARGET_MS,
        "met": chart_ms <= TARGET_MS,
    }


if __name__ == "__main__":
    print(json.dumps(run()))
