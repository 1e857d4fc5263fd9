"""A run's page paints its graph first (issue 24: paste to picture): the Trace is asked for once,
while the page's modules load (the page's preload, taken by its own fetch), and the drawing
is on screen before the parameter table is built."""

from __future__ import annotations

import pytest

from .conftest import Watched
from .test_own_code import SCRIPT, paste_and_run

pytestmark = pytest.mark.browser

# what the run's page had built by the frame that first painted its graph's nodes (set up in
# the page before any of its own scripts run)
BEFORE_FIRST_NODE = """
window.seenWhenDrawn = null;
new MutationObserver((changes, observer) => {
  if (!document.querySelector("#graph svg g.node")) return;
  observer.disconnect();
  requestAnimationFrame(() => {
    window.seenWhenDrawn = { rows: document.querySelectorAll("#params-body tr").length };
  });
}).observe(document, { subtree: true, childList: true });
"""


def test_the_trace_is_fetched_once_and_the_graph_painted_before_the_table(watched: Watched):
    page = watched.page
    traces: list[str] = []
    warnings: list[str] = []
    page.on("request", lambda r: "/api/runs/" in r.url and r.url.rstrip("/").split("/")[-2]
            == "runs" and traces.append(r.url))
    page.on("console", lambda m: m.type == "warning" and warnings.append(m.text))
    page.add_init_script(BEFORE_FIRST_NODE)
    paste_and_run(watched, SCRIPT)
    page.wait_for_selector("#progress", state="hidden")
    run_id = page.url.split("/runs/")[1].split("?")[0]
    assert traces == [f"{watched.base}/api/runs/{run_id}"]  # one request, the preload's
    assert not [w for w in warnings if "preload" in w], warnings  # and it was used
    assert page.evaluate("window.seenWhenDrawn") == {"rows": 0}
    rows = page.locator("#params-body tr").count()
    assert rows >= 2  # the table came after: the layer's weight and bias
