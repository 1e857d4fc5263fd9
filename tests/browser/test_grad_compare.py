"""A parameter's `.grad` after one backward pass next to after another (issue 35: "`.grad` after
#1 vs after #3", static/js/grad_compare.js), made in Chromium from passes the tracer recorded.

Each script runs plainly with torch first: `.grad` after every backward as PyTorch leaves it,
and the gradient each pass computed on its own (torch.autograd.grad, which leaves `.grad`
alone), so that what the page says ("added onto what #0 left", "started from nothing") and the
numbers it shows are held to what PyTorch did."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .axe import audit, said, serious
from .conftest import Watched, box, inside, module_page, open_scenario, screen, watched_at

pytestmark = pytest.mark.browser
torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

COMPARE = """([doc, shown, name, pair]) => {
  const ev = doc.events.find((e) => e.index === shown);
  // no pair asked: the one the compare opens on
  const hooks = { cell: null, onCell() {}, onCompare() {},
                  compare: pair || window.cmp.comparePair(doc, name, null, shown) };
  const box = window.cmp.gradCompare(doc, ev, name, hooks);
  document.body.append(box);
  const cells = (row) => [...box.querySelectorAll(`tr.${row} td`)].map((td) => td.textContent);
  return { says: [...box.querySelectorAll(".compare-says")].map((p) => p.textContent),
           head: [...box.querySelectorAll("thead th")].map((th) => th.textContent),
           norm: cells("compare-norm"), sum: cells("compare-sum"),
           options: [...box.querySelectorAll("select.compare-earlier option")]
             .map((o) => o.value) };
}"""

# three passes, an optimizer step after each; `clear` is what happens before each backward
LOOP = """
    import torch
    w = torch.nn.Parameter(torch.tensor([[1.0, -2.0], [0.5, 3.0]]))
    opt = torch.optim.SGD([w], lr=0.1)
    after, alone, held = [], [], []
    for i in range(3):
        {clear}
        held.append(None if w.grad is None else w.grad.clone())
        loss = (w * w * (i + 1)).sum()
        alone.append(torch.autograd.grad(loss, w, retain_graph=True)[0])  # this pass alone
        loss.backward()
        after.append(w.grad.clone())
        {between}
        opt.step()
"""


def script(clear: str = "pass", between: str = "pass") -> str:
    return textwrap.dedent(LOOP).replace("{clear}", clear).replace("{between}", between)


def plain(code: str) -> dict:
    ns: dict = {}
    exec(compile(code, "<plain>", "exec", dont_inherit=True), ns)
    return ns


def filling(doc: dict) -> list[int]:
    """The backward passes that fill .grad: torch.autograd.grad (the script's `alone`) leaves
    it as it was, so it is no pass to compare .grad after."""
    return [e["index"] for e in doc["events"] if e["kind"] == "backward" and "inputs" not in e]


@pytest.fixture(scope="module")
def compare(browser):
    with module_page(browser, "grad_compare.js", "cmp") as page:
        yield page


def shown(text: str) -> float:
    """A number as the page wrote it (fmt: six significant digits, or an exponent)."""
    return float(text.replace("−", "-"))


def close(text: str, value: float) -> bool:
    # six significant digits: within half a unit of the sixth
    return math.isclose(shown(text), value, rel_tol=5.01e-6, abs_tol=1e-9)


def test_passes_without_zero_grad_added_onto_what_the_first_left(compare, trace_source):
    code = script()
    ns = plain(code)
    after, alone, held = ns["after"], ns["alone"], ns["held"]
    # PyTorch: each backward added its own gradient onto the .grad the previous one left
    assert held[0] is None
    for k in (1, 2):
        assert torch.equal(held[k], after[k - 1])
        assert torch.allclose(after[k], after[k - 1] + alone[k])
    doc = trace_source(code)
    passes = filling(doc)
    first, last = passes[0], passes[2]
    got = compare.evaluate(COMPARE, [doc, last, "w", None])
    assert got["options"] == [str(i) for i in passes]  # every pass can be picked
    assert got["says"][0] == (f"Backwards #{passes[1]} and #{last} added onto what #{first} "
                              "left: no zero_grad between."), got
    # the steps between read .grad and left it: PyTorch's .grad before the next pass is the
    # one the pass before left (held == after above)
    assert "used this .grad in between and left it as it was" in got["says"][1], got
    assert got["head"][3] == f"what backwards #{passes[1]} and #{last} added"
    norms, sums = got["norm"], got["sum"]
    assert close(norms[0], after[0].double().norm().item()), norms
    assert close(norms[1], after[2].double().norm().item()), norms
    added = after[2].double() - after[0].double()  # what the later passes added, in torch
    assert torch.allclose(added, (alone[1] + alone[2]).double())
    assert close(norms[2], added.norm().item()), norms
    assert close(sums[0], after[0].double().sum().item()), sums
    assert close(sums[1], after[2].double().sum().item()), sums
    assert close(sums[2], added.sum().item()), sums


@pytest.mark.parametrize("clear, started", [
    ("opt.zero_grad()", "set to None (what zero_grad() does)"),
    ("opt.zero_grad(set_to_none=False)",
     "set to all zeros (what zero_grad(set_to_none=False) does)"),
])
def test_zero_grad_between_means_the_later_pass_started_afresh(compare, trace_source, clear,
                                                              started):
    code = script(clear=clear)
    ns = plain(code)
    after, alone, held = ns["after"], ns["alone"], ns["held"]
    # PyTorch: .grad before each pass is cleared, and after it holds that pass's gradient alone
    assert held[0] is None  # no pass yet
    for k in range(3):
        assert torch.allclose(after[k], alone[k])
    for k in (1, 2):
        assert held[k] is None if "set_to_none" not in clear else not held[k].any()
    doc = trace_source(code)
    passes = filling(doc)
    got = compare.evaluate(COMPARE, [doc, passes[2], "w", [passes[0], passes[2]]])
    nothing = "nothing" if "set_to_none" not in clear else "zero"
    assert got["says"] == [f".grad cleared between: it was {started} before backward #{passes[2]}, "
                           f"so #{passes[2]} started from {nothing}, and nothing of what "
                           f"#{passes[0]} left is in it."], got
    assert got["head"][3] == f"after #{passes[2]} − after #{passes[0]}"
    assert close(got["norm"][0], after[0].double().norm().item())
    assert close(got["norm"][1], after[2].double().norm().item())
    assert close(got["norm"][2], (after[2].double() - after[0].double()).norm().item())


def test_a_grad_the_script_changed_between_passes_is_said(compare, trace_source):
    code = script(between="torch.nn.utils.clip_grad_norm_([w], 1.0)")
    ns = plain(code)
    after, held, alone = ns["after"], ns["held"], ns["alone"]
    # PyTorch: clipping rescaled .grad after the pass, so the next pass found another one, and
    # added onto that
    assert not torch.equal(held[1], after[0])
    assert math.isclose(held[1].norm().item(), 1.0, rel_tol=1e-5)
    assert torch.allclose(after[1], held[1] + alone[1])
    doc = trace_source(code)
    passes = filling(doc)
    got = compare.evaluate(COMPARE, [doc, passes[1], "w", [passes[0], passes[1]]])
    assert (f".grad changed between backward #{passes[0]} and #{passes[1]}, outside any "
            "backward pass") in " ".join(got["says"]), got
    assert got["says"][1] == (f"Backward #{passes[1]} added onto what it found, not onto what "
                              f"#{passes[0]} left."), got
    assert len(got["says"]) == 2, got  # nothing about the step: .grad changed around it
    assert close(got["norm"][1], after[1].double().norm().item())


# ---- on the page -------------------------------------------------------------------------

SCENARIO, QUERY = "grad_accumulation", "variant=no_zero_grad&event=1&param=weight"


@pytest.fixture(scope="module")
def plain_batches() -> list[list[float]]:
    """weight.grad after each backward, as the scenario run plainly prints it."""
    done = subprocess.run([sys.executable, str(ROOT / "scenarios" / f"{SCENARIO}.py"),
                           "--variant", "no_zero_grad"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    found = re.findall(r"after batch \d+: weight\.grad = (\[.*\])", done.stdout)
    assert len(found) == 2, done.stdout
    return [torch.tensor(eval(f), dtype=torch.float64).flatten().tolist() for f in found]


@pytest.fixture(params=[(1366, 768), (390, 844)], ids=lambda s: f"{s[0]}x{s[1]}")
def sized(browser, server, request):
    width, height = request.param
    # bypass_csp: axe is injected as a script of the test's own
    with watched_at(browser, server, request.param, f"grad-compare-{width}x{height}",
                    bypass_csp=True) as w:
        yield w


def test_the_compare_is_on_screen_when_opened(sized: Watched, plain_batches):
    page = sized.page
    open_scenario(sized, SCENARIO, QUERY)
    opener = page.locator("#details .compare-open")
    opener.wait_for()
    opener.click()
    page.wait_for_selector("#details .grad-compare table")
    page.wait_for_timeout(300)  # scrolled into view on the next frame
    window = screen(page)
    for part in (".grad-compare h4", ".grad-compare .compare-pick", ".grad-compare .compare-says",
                 ".grad-compare table"):
        assert inside(box(page, f"#details {part}"), window), f"{part} is off the screen"
    sized.shot("opened", full_page=False)
    story = page.locator("#details .compare-says").first.inner_text()
    assert story == "Backward #1 added onto what #0 left: no zero_grad between.", story
    first, second = (torch.tensor(b) for b in plain_batches)
    norms = page.locator("#details tr.compare-norm td").all_inner_texts()
    assert close(norms[0], first.norm().item()) and close(norms[1], second.norm().item()), norms
    assert close(norms[2], (second - first).norm().item()), norms
    assert "NaN" not in page.locator("#details .grad-compare").inner_text()
    found = serious(audit(page))  # its pickers and table read as what they show
    assert not found, said(found)
    assert "vs=0,1" in page.url  # the compare is part of the view a link shares
    page.reload()
    page.wait_for_selector("#details .grad-compare table")
