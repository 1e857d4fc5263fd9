"""Findings first (issue 35): what a run's diagnostics found is on the first screen, above the
graph, at a laptop's, two projectors' and a phone's size; picking a finding brings the view
that answers it (the parameter's details) into the window without scrolling by hand.

What the finding says is checked against PyTorch itself: the scenario run as plain Python
prints `.grad` as PyTorch leaves it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Watched, api_trace, box, inside, open_scenario, screen, watched_at

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SIZES = [(1366, 768), (1920, 1080), (1280, 720), (390, 844)]
SCENARIO, QUERY = "weight_dropout", "variant=data"


@pytest.fixture(scope="module")
def plain_grads() -> dict[str, str]:
    """`.grad` of the two raw weights as plain PyTorch leaves them (the scenario prints them)."""
    done = subprocess.run([sys.executable, str(ROOT / "scenarios" / f"{SCENARIO}.py"),
                           "--variant", "data"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return dict(line.split(".grad: ", 1) for line in done.stdout.splitlines()
                if ".grad: " in line)


@pytest.fixture(params=SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def sized(browser, server, request):
    width, height = request.param
    with watched_at(browser, server, request.param, f"findings-{width}x{height}") as w:
        yield w


def test_the_findings_and_the_answer_they_name_are_on_the_first_screen(sized: Watched,
                                                                       plain_grads):
    page = sized.page
    open_scenario(sized, SCENARIO, QUERY)
    window = screen(page)
    assert inside(box(page, "#findings"), window), "the findings are below the first screen"
    # the strip's first line is the Trace's first warning, and it names a parameter that
    # PyTorch left without a gradient
    doc = api_trace(sized, SCENARIO, QUERY)
    first = next(d for d in doc["diagnostics"] if d["level"] == "warning")
    named = first["params"][0]
    assert plain_grads[named] == "None", plain_grads
    line = page.locator("#findings .finding-text").first.inner_text()
    assert named in line and "no gradient" in line, line
    sized.shot("opened", full_page=False)

    page.locator("#findings .finding-pick").first.click()
    page.wait_for_function("(name) => document.querySelector('#details-body')"
                           "?.textContent.includes(name)", arg=named)
    page.wait_for_timeout(300)  # the layout moves the panel up on the next frame
    details = box(page, "#details")
    assert details["y"] >= -1 and details["y"] < window["height"] - 100, details
    answer = box(page, "#details-body")
    assert answer["y"] < window["height"] and answer["bottom"] > 0, answer
    if window["width"] >= 600:
        # beside the graph, not instead of it: the graph is still on the screen
        graph = box(page, "#graph")
        assert graph["y"] < window["height"] - 150 and graph["bottom"] > 150, graph
    sized.shot("picked", full_page=False)


def test_the_most_serious_finding_comes_first_and_each_line_is_its_first_sentences(watched):
    page = watched.page
    open_scenario(watched, SCENARIO, QUERY)
    ranked, lines = page.evaluate("""async () => {
      const f = await import("/static/js/findings.js");
      const ds = [{level: "info", message: "An info."}, {level: "warning", message: "W1."},
                  {level: "error", message: "The error."}, {level: "warning", message: "W2."}];
      return [f.ranked(ds).map((d) => d.message),
              [f.summary("`x.data` is read at line 3. Why: `.data` has no graph. More here."),
               f.summary("A long first sentence that goes on and on about what happened in " +
                         "the run, well past the length a first sentence is followed by a " +
                         "second at. And a second one.")]];
    }""")
    assert ranked == ["The error.", "W1.", "W2.", "An info."]
    # the dots inside `code` end no sentence; a short first sentence brings its second
    assert lines[0] == "`x.data` is read at line 3. Why: `.data` has no graph."
    assert lines[1].endswith("at.") and "second one" not in lines[1]
