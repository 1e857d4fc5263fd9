"""The widget in a real JupyterLab on loopback, driven by Chromium (issue 22): run all cells of
a notebook that trains one step under %%autograd_lab; the graph appears in the output, a click
on a parameter shows its accumulation bars adding up to .grad, and the replay steps."""

from __future__ import annotations

import base64
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.trace_facts import grad_fns

from .conftest import ARTIFACTS

pytest.importorskip("jupyterlab")
pytest.importorskip("anywidget")
pytestmark = [pytest.mark.browser, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
TRACE_MIMETYPE = "application/vnd.autograd-lab.trace+json"

CELLS = [
    "%load_ext autograd_lab",
    "import torch\nfrom torch import nn\ntorch.manual_seed(0)\n"
    "layer, head = nn.Linear(3, 3), nn.Linear(3, 1)\n"
    "x, y = torch.randn(6, 3), torch.randn(6, 1)\n"
    "opt = torch.optim.SGD([*layer.parameters(), *head.parameters()], lr=0.1)",
    "%%autograd_lab\nopt.zero_grad()\n"
    "loss = nn.functional.mse_loss(head(torch.tanh(layer(torch.tanh(layer(x))))), y)\n"
    "loss.backward()\nopt.step()",
]
# the same on a kernel whose machine has no graphviz: the widget lays the graph out in the
# browser (graphviz in WebAssembly); then a tensor's graph, a view with no pass to replay
NO_DOT_CELLS = [
    CELLS[0],
    "import os, shutil\n"
    "os.environ['PATH'] = os.pathsep.join(p for p in os.environ['PATH'].split(os.pathsep)\n"
    "                                     if not os.path.exists(os.path.join(p, 'dot')))\n"
    "assert shutil.which('dot') is None",
    *CELLS[1:],
    "import autograd_lab\nautograd_lab.show(loss)",
]
# a traced cell that fails in its backward: an in-place change to what autograd saved
FAILING_CELLS = [
    *CELLS[:2],
    "%%autograd_lab\nprint('before the failure')\nh = torch.sigmoid(layer(x))\nh.add_(1)\n"
    "h.sum().backward()",
]
# issue 37, point 4: the page's controls in the widget. A model defined in cell [1] (its
# encoder's six blocks of twelve layers: 300+ nodes, drawn with the repeated blocks folded, as
# the page draws them) and used in cell [2], with two backward passes
MODEL_CELL = """%load_ext autograd_lab
import torch
from torch import nn
torch.manual_seed(0)
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(4, 4) for _ in range(12)])
    def forward(self, x):
        for lin in self.lins:
            x = torch.relu(lin(x))
        return x
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block() for _ in range(6)])
    def forward(self, x):
        for block in self.layers:
            x = block(x)
        return x
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.head = Encoder(), nn.Linear(4, 1)
    def forward(self, x):
        return self.head(self.encoder(x))
model = Net()
x, y = torch.randn(5, 4), torch.randn(5, 1)"""
TRAIN_CELL = ("%%autograd_lab\nloss = nn.functional.mse_loss(model(x), y)\nloss.backward()\n"
              "model.head(x).pow(2).sum().backward()")
# a deep chain drawn node by node: far taller than any box, its parameters all down its length
DEEP_CELL = ("%%autograd_lab\nchain = nn.Sequential(*[nn.Linear(4, 4) for _ in range(40)])\n"
             "chain(x).sum().backward()")
CONTROL_CELLS = [MODEL_CELL, TRAIN_CELL, DEEP_CELL]
NOTEBOOKS = {"train.ipynb": CELLS, "no_dot.ipynb": NO_DOT_CELLS, "failing.ipynb": FAILING_CELLS,
             "saved.ipynb": CELLS, "saved_no_dot.ipynb": NO_DOT_CELLS,
             "controls.ipynb": CONTROL_CELLS}


# the notebook open with all its cells and its kernel started and idle (the one asked for:
# JupyterLab reopens earlier tests' notebooks too, and may show one of them first)
READY = """([cells, path]) => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  if (!w || !w.context || w.context.path !== path) return false;
  const kernel = w && w.sessionContext && w.sessionContext.session &&
    w.sessionContext.session.kernel;
  return Boolean(w && w.content && w.content.widgets.length === cells && kernel &&
    kernel.status === "idle");
}"""


# every cell has run (an execution count on each, the kernel idle again)
DONE = """cells => {
  const w = window.jupyterapp.shell.currentWidget;
  return w.content.widgets.length === cells && w.sessionContext.session.kernel.status === "idle" &&
    w.content.widgets.every((c) => c.model.executionCount);
}"""
SCROLL_TO_LAST = """async () => {
  const notebook = window.jupyterapp.shell.currentWidget.content;
  await notebook.scrollToCell(notebook.widgets[notebook.widgets.length - 1]);
}"""



@contextmanager
def _shot_if_it_fails(page, context, name: str):
    """The page as it was when the block failed (test-artifacts/browser/NAME); the browser
    context closed in any case."""
    try:
        yield
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / name))
        raise
    finally:
        context.close()

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(base URL, token) of a JupyterLab serving a folder with the notebook above; every
    Jupyter and IPython folder is a temp one."""
    tmp = tmp_path_factory.mktemp("lab")
    for name, cells in NOTEBOOKS.items():
        notebook = {"cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [],
                               "execution_count": None} for c in cells],
                    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                "language": "python"}},
                    "nbformat": 4, "nbformat_minor": 5}
        (tmp / name).write_text(json.dumps(notebook))
    # JupyterLab's own question about its news (a toast over the outputs): answered no
    settings = tmp / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp / "config"),
           "JUPYTER_DATA_DIR": str(tmp / "data"), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
           "IPYTHONDIR": str(tmp / "ipython"), "JUPYTER_PLATFORM_DIRS": "1",
           "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}
    log = (ARTIFACTS.parent / "jupyterlab.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
             f"--port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp}",
             "--allow-root",  # CI runs as root; JupyterLab refuses it without this
             "--LabApp.extension_manager=readonly",  # no registry asked for extensions
             f"--LabApp.user_settings_dir={tmp / 'user-settings'}",
             "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
            cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/api/status", params={"token": token},
                             timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("JupyterLab did not start: " + log.read_text()[-3000:])
            time.sleep(0.5)
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _shown(page) -> str:
    """The selector of the notebook in the tab shown: JupyterLab reopens the notebooks earlier
    tests opened, in tabs behind it, whose cells stay in the page."""
    return "#" + page.evaluate("() => window.jupyterapp.shell.currentWidget.id")


def _run_all(page, base: str, token: str, name: str) -> None:
    page.goto(f"{base}/lab/tree/{name}?token={token}")
    page.wait_for_function(READY, arg=[len(NOTEBOOKS[name]), name])
    # not awaited: the command's promise ends when every cell has run
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")


def _check_the_reused_layers_bars(widget) -> None:
    """The drawn pass, and a parameter's bars: two uses of the reused layer, adding up."""
    widget.locator(".widget-graph svg g.node").first.wait_for()
    assert widget.locator(".widget-graph svg g.node").count() >= 8
    # its node may sit where the graph opened panned away from: the click event is sent to it
    # as a tap on it would, without scrolling the notebook to it
    widget.locator(".widget-graph svg g.node.kind-param",
                   has_text="layer.weight").first.dispatch_event("click")
    check = widget.locator(".accumulation p.check")
    check.wait_for()
    assert "✓" in check.inner_text()
    assert "Used 2 times" in widget.locator(".accumulation").inner_text()
    assert abs(float(check.get_attribute("data-sum")) -
               float(check.get_attribute("data-grad"))) < 1e-4


def test_run_all_then_the_graph_a_parameter_s_bars_and_the_replay(browser, lab):
    base, token = lab
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(90_000)  # a kernel's start and first import of torch
    foreign: list[str] = []
    page.on("request", lambda r: r.url.startswith("http") and not r.url.startswith(base)
            and foreign.append(r.url))
    with _shot_if_it_fails(page, context, "jupyterlab-failed.png"):
        _run_all(page, base, token, "train.ipynb")
        widget = ".autograd-lab-widget"
        _check_the_reused_layers_bars(page.locator(widget))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.locator(widget).screenshot(path=str(ARTIFACTS / "jupyterlab-widget-param.png"))
        # the replay: three nodes of backward, in the engine's order
        for _ in range(3):
            page.locator(f"{widget} button#replay-next").click()
        status = page.locator(f"{widget} p.replay-status")
        assert status.get_attribute("data-step") == "3"
        assert page.locator(f"{widget} .widget-graph svg g.node.is-current").count() == 1
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-widget-replay.png"))
        assert not foreign, foreign


def test_a_kernel_without_graphviz_gets_its_graphs_laid_out_in_the_browser(browser, lab):
    base, token = lab
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(90_000)
    foreign: list[str] = []
    page.on("request", lambda r: r.url.startswith("http") and not r.url.startswith(base)
            and foreign.append(r.url))
    with _shot_if_it_fails(page, context, "jupyterlab-no-dot-failed.png"):
        _run_all(page, base, token, "no_dot.ipynb")
        widgets = page.locator(".autograd-lab-widget")
        _check_the_reused_layers_bars(widgets.first)
        # laid out here: the vendored graphviz was loaded into this page
        assert page.evaluate("() => Boolean(window[Symbol.for('autograd-lab.graphviz')])")
        widgets.first.locator("button#replay-next").click()
        assert widgets.first.locator("p.replay-status").get_attribute("data-step") == "1"
        # JupyterLab draws only the cells in view: the last one's output is brought there once
        # every cell has run
        page.wait_for_function(DONE, arg=len(NOTEBOOKS["no_dot.ipynb"]))
        page.evaluate(SCROLL_TO_LAST)
        # show(loss): the graph make_dot walks, drawn in the browser; nothing to replay
        second = widgets.nth(1)
        second.locator(".widget-graph svg g.node").first.wait_for()
        assert second.locator(".widget-graph svg g.node").count() >= 8
        assert second.locator(".replay-controls").count() == 0
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        widgets.first.screenshot(path=str(ARTIFACTS / "jupyterlab-widget-no-dot.png"))
        second.locator(".widget-graph svg g.node").first.dispatch_event("click")
        assert "Node" in second.locator(".widget-details-title").inner_text()
        second.screenshot(path=str(ARTIFACTS / "jupyterlab-widget-no-dot-view.png"))
        assert not foreign, foreign


def test_a_failed_cell_says_its_explanation_after_its_prints_on_its_own_lines_and_no_wall(
        browser, lab):
    """Issue 37, point 2: what the cell printed, streamed as it ran, and then the explanation
    and its fix as the next thing (no traceback between), its lines
    the cell's as JupyterLab shows it (the `%%autograd_lab` line is line 1), no stderr wall,
    and the widget lists the findings."""
    base, token = lab
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(90_000)
    with _shot_if_it_fails(page, context, "jupyterlab-failing-failed.png"):
        _run_all(page, base, token, "failing.ipynb")
        page.wait_for_function(DONE, arg=len(FAILING_CELLS))
        page.evaluate(SCROLL_TO_LAST)
        # JupyterLab reopens the notebooks earlier tests opened, in tabs behind this one
        cell = page.locator(f"{_shown(page)} .jp-CodeCell").nth(2)
        count = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[2]"
                              ".model.executionCount")
        cell.locator(".jp-InputPrompt", has_text=f"[{count}]").wait_for()
        source = FAILING_CELLS[2].split("\n")
        changed, failed = source.index("h.add_(1)") + 1, source.index("h.sum().backward()") + 1
        outputs = cell.locator(".jp-OutputArea-output")
        outputs.last.locator(".autograd-lab-widget .widget-graph svg g.node").first.wait_for()
        # what it printed came as it ran, before it failed; the explanation is next
        assert "before the failure" in outputs.first.inner_text()
        first = outputs.nth(1).inner_text()
        assert first.startswith(f"The cell stopped with RuntimeError at cell {count}, "
                                f"line {failed}."), first
        assert "What happened" in first and f"Where: cell {count}, line {changed}" in first
        assert "h = h.clone()" in first
        # no stderr at all: anomaly mode's forward traceback is kept in the Trace
        assert cell.locator("[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
        assert "Traceback" not in cell.inner_text()
        findings = outputs.last.locator(".widget-findings")
        said = findings.inner_text()
        # the sentence's "Line 4" of the code run, said as the cell's (issue 37: "Line 42"
        # beside "cell 8, line 3")
        assert f"Cell {count}, line {changed} (h.add_(1))" in said, said
        assert "Line " not in said
        # its "show 1 node": the node it names selected, as on the page
        findings.locator("li.diag-error button.diag-show").click()
        selected = outputs.last.locator(".widget-graph svg g.node.is-selected")
        assert selected.count() == 1 and "SigmoidBackward0" in selected.text_content()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        # the cell's outputs from their first (the prints, then the explanation) down, as a
        # reader finds them
        outputs.first.evaluate("el => el.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-failed-cell.png"))


def _run_save_and_reopen(browser, base: str, token: str, name: str):
    """Run `name`, save it, stop every kernel, open the file again in a new page (a new kernel:
    none of the widgets' models). While the live view ran, its static twin was hidden (one
    graph on screen), and it has its picture, the kernel's or the one the browser laid out and
    sent back (saved only once there). Returns (context, page, the shown notebook's selector),
    the last traced cell's output scrolled into view."""
    cells = NOTEBOOKS[name]
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(90_000)
    static = ".jp-OutputArea-output [data-autograd-lab-static]"
    try:
        _run_all(page, base, token, name)
        page.wait_for_function(DONE, arg=len(cells))
        shown = _shown(page)
        page.locator(f"{shown} .autograd-lab-widget .widget-graph svg g.node").first.wait_for()
        first = page.locator(f"{shown} {static}").first
        assert not first.is_visible()
        page.wait_for_function(
            "sel => { const s = [...document.querySelectorAll(sel)];"
            " return s.length && s.every(o => o.querySelector('img.autograd-lab-picture')); }",
            arg=f"{shown} {static}")
        assert not first.is_visible()  # shown again with its picture, still hidden: one graph
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        deadline = time.monotonic() + 60
        while not any(TRACE_MIMETYPE in o.get("data", {})
                      for c in _saved_cells(base, token, name) for o in c["outputs"]):
            assert time.monotonic() < deadline, "the notebook was not saved with its outputs"
            time.sleep(0.5)
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"jupyterlab-save-failed-{name}.png"))
        raise
    finally:
        context.close()
    for session in httpx.get(f"{base}/api/sessions", params={"token": token}).json():
        httpx.delete(f"{base}/api/sessions/{session['id']}", params={"token": token})
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(90_000)
    try:
        page.goto(f"{base}/lab/tree/{name}?token={token}")
        page.wait_for_function(READY, arg=[len(cells), name])
        # the new kernel is idle and the widget manager has looked for the models: what a
        # missing model makes JupyterLab say is on the page by now (it waits 2 s for one)
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')].every(o =>"
            " !o.textContent.startsWith('Loading widget'))")
        return context, page, _shown(page)
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"jupyterlab-reopen-failed-{name}.png"))
        context.close()
        raise


def _saved_cells(base: str, token: str, name: str) -> list[dict]:
    """The notebook's cells as the file on disk holds them (the contents API)."""
    answer = httpx.get(f"{base}/api/contents/{name}", params={"token": token}, timeout=30)
    answer.raise_for_status()
    return answer.json()["content"]["cells"]


def _drawn(where) -> ET.Element:
    """The picture shown in `where`: its <img> loaded and on screen, and the SVG it shows."""
    image = where.locator("img.autograd-lab-picture")
    image.wait_for()
    assert image.is_visible()
    assert image.evaluate("el => el.complete && el.naturalWidth > 0"), "the image did not load"
    url = image.get_attribute("src")
    prefix = "data:image/svg+xml;base64,"
    assert url.startswith(prefix)
    return ET.fromstring(base64.b64decode(url[len(prefix):]))


def _no_widget_error_seen(page, shown: str) -> None:
    """Nothing on screen says a widget could not be shown: JupyterLab's "Error displaying
    widget: model not found" is hidden (the text is in the page, on a node not displayed)."""
    assert "Error displaying widget" not in page.locator("body").inner_text()
    assert "Error displaying widget" not in page.locator(shown).inner_text()
    errors = page.locator(f"{shown} .jp-OutputArea-output.jupyter-widgets")
    assert errors.count() >= 1, "JupyterLab found the widget's model: nothing was tested"
    for i in range(errors.count()):
        assert "model not found" in errors.nth(i).text_content()
        assert not errors.nth(i).is_visible()


def test_a_saved_notebook_reopened_with_a_new_kernel_shows_the_picture_and_no_error(
        browser, lab):
    """Issue 37, point 3: reopened with a new kernel, the traced cell shows the picture stored
    in its static output, one line saying to run the cell for the interactive view, and not
    JupyterLab's "Error displaying widget: model not found" where the live view was."""
    base, token = lab
    context, page, shown = _run_save_and_reopen(browser, base, token, "saved.ipynb")
    with _shot_if_it_fails(page, context, "jupyterlab-reopen-failed.png"):
        page.evaluate(SCROLL_TO_LAST)
        cell = page.locator(f"{shown} .jp-CodeCell").last
        picture = cell.locator(".jp-OutputArea-output [data-autograd-lab-static]")
        svg = _drawn(picture)
        assert sum("node" in (g.get("class") or "").split() for g in svg.findall(".//{*}g")) >= 8
        # the parameters of the step the cell ran, the reused layer's among them
        labels = "".join(svg.itertext())
        assert "layer.weight" in labels and "head.weight" in labels
        note = picture.locator("p.autograd-lab-rerun")
        assert note.is_visible() and "run this cell" in note.inner_text()
        _no_widget_error_seen(page, shown)
        # what the cell's outputs say, top to bottom: the note, the picture, the summary
        said = cell.locator(".jp-OutputArea").inner_text()
        assert said.strip().startswith("A saved picture: run this cell"), said
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        picture.evaluate("el => el.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-reopened.png"))
        # and where the live view was, below the picture and its summary: nothing
        picture.locator("pre").evaluate("el => el.scrollIntoView({block: 'center'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-reopened-live-view.png"))


def _plain_backward_names() -> set[str]:
    """The classes of the backward functions PyTorch makes for CELLS' traced step, run plainly
    here (the graph walked from the loss's grad_fn)."""
    ns: dict = {}
    exec(CELLS[1], ns)  # noqa: S102 - the test's own cells
    exec(CELLS[2].split("\n", 1)[1].replace("loss.backward()\nopt.step()", ""), ns)  # noqa: S102
    # AccumulateGrad: drawn as the parameters it sums into
    return {type(fn).__name__ for fn in grad_fns(ns["loss"].grad_fn)} - {"AccumulateGrad"}


def test_a_saved_notebook_of_a_kernel_without_graphviz_shows_the_browser_s_picture_reopened(
        browser, lab):
    """Issue 37, point 3: a kernel with no `dot` draws no picture; the live view lays the graph
    out in the browser and sends it back, and the kernel keeps it in the static output.
    Reopened with a new kernel, the traced cell shows that picture, PyTorch's backward
    functions in it, under the note to run the cell, and no widget error."""
    base, token = lab
    names = _plain_backward_names()
    assert {"AddmmBackward0", "TanhBackward0", "MseLossBackward0"} <= names
    context, page, shown = _run_save_and_reopen(browser, base, token, "saved_no_dot.ipynb")
    with _shot_if_it_fails(page, context, "jupyterlab-reopen-no-dot-failed.png"):
        traced = page.locator(f"{shown} .jp-CodeCell").nth(NO_DOT_CELLS.index(CELLS[2]))
        traced.evaluate("el => el.scrollIntoView({block: 'start'})")
        static = traced.locator(".jp-OutputArea-output [data-autograd-lab-static]")
        assert static.is_visible()
        svg = _drawn(static)
        labels = "".join(svg.itertext())
        assert all(name in labels for name in names), (names, labels)
        assert "layer.weight" in labels and "head.weight" in labels
        said = static.inner_text()
        assert said.startswith("A saved picture: run this cell"), said
        assert "laid out in the browser" in said and "draws no static picture" not in said
        # the file holds it as the kernel's drawing is held: SVG, and the HTML's <img> of it
        saved = _saved_cells(base, token, "saved_no_dot.ipynb")
        kept = [o["data"] for o in saved[NO_DOT_CELLS.index(CELLS[2])]["outputs"]
                if TRACE_MIMETYPE in o.get("data", {})]
        assert len(kept) == 1 and "<script" not in kept[0]["image/svg+xml"]
        assert all(name in kept[0]["image/svg+xml"] for name in names)
        _no_widget_error_seen(page, shown)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-reopened-no-dot.png"))
        # the tensor's graph (show(loss)) too
        page.evaluate(SCROLL_TO_LAST)
        last = page.locator(f"{shown} .jp-CodeCell").last
        assert "MseLossBackward0" in "".join(_drawn(last.locator(
            ".jp-OutputArea-output [data-autograd-lab-static]")).itertext())
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-reopened-no-dot-view.png"))


def test_a_saved_notebook_opened_untrusted_shows_the_picture_and_no_svg_text(browser, lab):
    """A notebook from someone else (not signed here: JupyterLab opens it untrusted, renders a
    sanitized text/html and no widget): the traced cell still shows its picture, and not the
    SVG's labels as loose text (the sanitizer drops <svg> and keeps its text)."""
    base, token = lab
    saved = httpx.get(f"{base}/api/contents/saved.ipynb", params={"token": token},
                      timeout=30).json()["content"]
    assert any(TRACE_MIMETYPE in o.get("data", {}) for o in saved["cells"][-1]["outputs"]), \
        "test_a_saved_notebook_reopened... saves saved.ipynb first"
    for cell in saved["cells"]:
        cell["metadata"].pop("trusted", None)
    # another notebook than the one signed here (the notary knows its hash), as a shared one is
    saved["metadata"]["shared_by"] = "someone else"
    httpx.put(f"{base}/api/contents/shared.ipynb", params={"token": token}, timeout=30,
              json={"type": "notebook", "format": "json", "content": saved}).raise_for_status()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(90_000)
    with _shot_if_it_fails(page, context, "jupyterlab-untrusted-failed.png"):
        page.goto(f"{base}/lab/tree/shared.ipynb?token={token}")
        page.wait_for_function(READY, arg=[len(CELLS), "shared.ipynb"])
        shown = _shown(page)
        assert not page.evaluate("() => window.jupyterapp.shell.currentWidget.content.model"
                                 ".cells.get(2).trusted")
        page.evaluate(SCROLL_TO_LAST)
        cell = page.locator(f"{shown} .jp-CodeCell").last
        outputs = cell.locator(".jp-OutputArea")
        svg = _drawn(outputs)
        labels = "".join(svg.itertext())
        assert "layer.weight" in labels and "TanhBackward0" in labels
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        outputs.evaluate("el => el.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-untrusted.png"))
        # none of the drawing's words as loose text, as an inline <svg> left them
        said = outputs.inner_text()
        assert "TanhBackward0" not in said and "layer.weight" not in said, said
        # one note, saying what to do (the live view's output says nothing of its own)
        assert said.count("run this cell") == 1 and "live view" not in said, said
        assert said.strip().startswith("A saved picture: run this cell"), said
        outputs.evaluate("el => el.scrollIntoView({block: 'end'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-untrusted-end.png"))


# ---- issue 37, point 4: the page's controls in the widget ---------------------------------

def _plain_model() -> dict:
    """The model cell run plainly here (its `%load_ext` line blank, so lines stay the cell's):
    the namespace, with the first pass's loss as PyTorch computes it."""
    ns: dict = {}
    code = "\n" + MODEL_CELL.split("\n", 1)[1]
    exec(compile(code, "model_cell", "exec"), ns)  # noqa: S102 - the test's own cell
    ns["loss"] = ns["nn"].functional.mse_loss(ns["model"](ns["x"]), ns["y"])
    return ns


def _box_of(locator) -> dict:
    b = locator.bounding_box()
    assert b is not None, "not shown"
    return {**b, "right": b["x"] + b["width"], "bottom": b["y"] + b["height"]}


def _inside(inner: dict, outer: dict, slack: float = 1.0) -> bool:
    return (inner["x"] >= outer["x"] - slack and inner["y"] >= outer["y"] - slack
            and inner["right"] <= outer["right"] + slack
            and inner["bottom"] <= outer["bottom"] + slack)


# the focused element inside the widget's shadow root: its id and read name
FOCUSED = """el => { const a = el.getRootNode().activeElement;
  return a ? {id: a.id, label: a.getAttribute('aria-label') || '', tag: a.tagName} : null; }"""
# the graph's zoom (svg-pan-zoom's viewport scale) and the scroll of what holds the notebook
ZOOM = "el => el.querySelector('svg .svg-pan-zoom_viewport').getCTM().a"
SCROLLED = """el => { let n = el.getRootNode().host;
  while (n && !(n.scrollHeight > n.clientHeight + 1 &&
                /(auto|scroll)/.test(getComputedStyle(n).overflowY))) n = n.parentElement;
  return n ? n.scrollTop : null; }"""


@pytest.fixture(scope="module")
def controls(browser, lab):
    """The controls notebook run in JupyterLab: (page, its widget)."""
    base, token = lab
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(90_000)
    try:
        _run_all(page, base, token, "controls.ipynb")
        page.wait_for_function(DONE, arg=len(CONTROL_CELLS))
        widget = page.locator(f"{_shown(page)} .autograd-lab-widget").first
        widget.locator(".widget-graph svg g.node").first.wait_for()
        widget.evaluate("el => el.scrollIntoView({block: 'start'})")
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-controls-failed.png"))
        context.close()
        raise
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield page, widget
    context.close()


def _named(label: str) -> str:
    """The node's name in its read name (graph.js describe): "loss (MseLossBackward0), op, …"
    or "AddmmBackward0, op, …"."""
    first = label.split(", ")[0]
    return first[first.rindex(" (") + 2:-1] if first.endswith(")") and " (" in first else first


def _shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / name))


def test_the_widget_opens_on_the_loss_and_parameters_and_fit_shows_every_node(controls):
    page, widget = controls
    try:
        graph = widget.locator(".widget-graph")
        area = _box_of(graph)
        # a box sized to the drawing, bounded by the window (80% of its 1000 px)
        assert 200 <= area["height"] <= 800 + 1
        # opened on what matters: the loss (the graph's output) and the parameters drawn, whole
        matters = graph.locator("svg g.node.kind-output, svg g.node.kind-param")
        assert matters.count() >= 3  # the output, head.weight, head.bias
        for i in range(matters.count()):
            node = matters.nth(i)
            assert _inside(_box_of(node), area), node.get_attribute("aria-label")
        _shot(page, "jupyterlab-widget-opened.png")
        # zoomed in past the box, then Fit: every node inside the box again
        zoom = widget.locator("button#zoom-in")
        for _ in range(6):
            zoom.click()
        nodes = graph.locator("svg g.node")
        assert any(not _inside(_box_of(nodes.nth(i)), area) for i in range(nodes.count()))
        widget.locator("button#zoom-fit").click()
        page.wait_for_timeout(100)
        for i in range(nodes.count()):
            assert _inside(_box_of(nodes.nth(i)), area), nodes.nth(i).get_attribute("aria-label")
        _shot(page, "jupyterlab-widget-fit.png")
    except Exception:
        _shot(page, "jupyterlab-widget-fit-failed.png")
        raise


def test_arrow_keys_walk_the_widget_s_graph_along_pytorch_s_edges(controls):
    page, widget = controls
    try:
        loss = _plain_model()["loss"]
        active = "() => window.jupyterapp.shell.currentWidget.content.activeCellIndex"
        # Tab from the Fit button: the graph is one Tab stop, its output node (the loss)
        widget.locator("button#zoom-fit").click()
        # (the click makes the widget's cell the active one: run alone, it was the last cell)
        cell_before = page.evaluate(active)
        page.keyboard.press("Tab")
        focused = widget.evaluate(FOCUSED)
        output = widget.locator(".widget-graph svg g.node.kind-output")
        assert focused["id"] == output.get_attribute("id"), focused
        # ↑ walks towards the inputs: the loss's own grad_fn, as PyTorch made it
        page.keyboard.press("ArrowUp")
        focused = widget.evaluate(FOCUSED)
        assert _named(focused["label"]) == type(loss.grad_fn).__name__, focused
        # and on, along an edge PyTorch's graph has: one of its grad_fn's next functions
        page.keyboard.press("ArrowUp")
        focused = widget.evaluate(FOCUSED)
        linked = {type(fn).__name__ for fn, _ in loss.grad_fn.next_functions if fn is not None}
        assert _named(focused["label"]) in linked, (focused, linked)
        assert widget.locator(".widget-graph svg .focus-ring").count() == 1
        # JupyterLab's own arrows (the cell above) left alone while the graph has the keys
        assert page.evaluate(active) == cell_before
        _shot(page, "jupyterlab-widget-keys.png")
        # ↓ goes back the way it came
        page.keyboard.press("ArrowDown")
        assert _named(widget.evaluate(FOCUSED)["label"]) == type(loss.grad_fn).__name__
    except Exception:
        _shot(page, "jupyterlab-widget-keys-failed.png")
        raise


def test_esc_gives_the_keys_back_to_the_notebook_in_command_mode(controls):
    """JupyterLab's shortcuts are off while the widget has the keys (its arrows are the
    graph's); Esc hands them back: the widget's cell, in command mode, where `k` selects the
    cell above, as JupyterLab's own shortcut does."""
    page, widget = controls
    notebook = "window.jupyterapp.shell.currentWidget.content"
    try:
        assert "Esc gives the keys back to the notebook" in widget.locator(
            "p.widget-keys").inner_text()
        widget.locator("button#zoom-fit").click()
        page.keyboard.press("Tab")  # into the graph: the node it last had (a roving Tab stop)
        focused = widget.evaluate(FOCUSED)
        assert focused and widget.locator(
            f".widget-graph svg g.node[id='{focused['id']}']").count() == 1, focused
        cell = page.evaluate(f"() => {notebook}.activeCellIndex")
        page.keyboard.press("k")  # the graph has the keys: JupyterLab's `k` does nothing
        assert page.evaluate(f"() => {notebook}.activeCellIndex") == cell
        page.keyboard.press("Escape")
        assert widget.evaluate(FOCUSED) is None  # nothing in the widget has the focus
        assert page.evaluate(f"() => {notebook}.mode") == "command"
        assert page.evaluate(f"() => {notebook}.activeCellIndex") == cell
        assert page.evaluate(f"() => document.activeElement === {notebook}.activeCell.node")
        page.keyboard.press("k")  # now JupyterLab's: the cell above
        assert page.evaluate(f"() => {notebook}.activeCellIndex") == cell - 1
        _shot(page, "jupyterlab-widget-esc.png")
        page.keyboard.press("j")
        assert page.evaluate(f"() => {notebook}.activeCellIndex") == cell
    except Exception:
        _shot(page, "jupyterlab-widget-esc-failed.png")
        raise


def test_the_wheel_scrolls_the_notebook_unless_the_graph_has_focus(controls):
    page, widget = controls
    try:
        graph = widget.locator(".widget-graph")
        # focus elsewhere: the first cell's prompt, as a reader scrolling past would have it
        page.locator(f"{_shown(page)} .jp-Cell").first.locator(".jp-InputPrompt").click()
        graph.evaluate("el => el.scrollIntoView({block: 'center'})")
        page.wait_for_timeout(200)
        zoom, scrolled = graph.evaluate(ZOOM), widget.evaluate(SCROLLED)
        assert scrolled and scrolled > 0  # the model cell is above: room to scroll up
        graph.hover()
        page.mouse.wheel(0, -120)
        page.wait_for_timeout(300)
        assert widget.evaluate(SCROLLED) < scrolled  # the notebook scrolled
        assert graph.evaluate(ZOOM) == pytest.approx(zoom)  # and the graph did not zoom
        # with focus (a click on the graph, Tab to its nodes), the wheel zooms the graph
        widget.locator("button#zoom-fit").click()
        page.keyboard.press("Tab")
        graph.hover()
        zoom, scrolled = graph.evaluate(ZOOM), widget.evaluate(SCROLLED)
        page.mouse.wheel(0, -120)
        page.wait_for_timeout(300)
        assert graph.evaluate(ZOOM) > zoom * 1.05
        assert widget.evaluate(SCROLLED) == pytest.approx(scrolled, abs=1)
    except Exception:
        _shot(page, "jupyterlab-widget-wheel-failed.png")
        raise


def test_a_node_of_a_model_from_another_cell_says_that_cell_s_line(controls):
    page, widget = controls
    try:
        import dis

        ns = _plain_model()
        counts = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets"
                               ".map((c) => c.model.executionCount)")
        model_cell, traced_cell = counts[:2]
        # where Python compiled the head's call in Net.forward: the line its `self.head` is on
        head_line = next(i.positions.lineno for i in dis.get_instructions(ns["Net"].forward)
                         if i.argval == "head")
        assert MODEL_CELL.split("\n")[head_line - 1].strip().startswith("return self.head(")
        loss_line = TRAIN_CELL.split("\n").index(
            "loss = nn.functional.mse_loss(model(x), y)") + 1
        graph = widget.locator(".widget-graph svg")
        head = graph.locator("g.node.kind-op[aria-label*='module head']").filter(
            has_text="AddmmBackward0")
        assert head.count() == 1
        assert f"cell {model_cell}, line {head_line}" in head.get_attribute("aria-label")
        # the loss is made in the traced cell itself: its line there
        mse = graph.locator("g.node", has_text=type(ns["loss"].grad_fn).__name__)
        assert f"cell {traced_cell}, line {loss_line}" in mse.first.get_attribute("aria-label")
        head.dispatch_event("click")
        details = widget.locator(".widget-details")
        said = details.inner_text()
        assert f"cell {model_cell}, line {head_line} (called from cell {traced_cell}, " \
               f"line {loss_line}" in said, said
        _shot(page, "jupyterlab-widget-other-cell.png")
    except Exception:
        _shot(page, "jupyterlab-widget-other-cell-failed.png")
        raise


def test_one_button_per_backward_pass_draws_that_pass(controls):
    page, widget = controls
    try:
        ns = _plain_model()
        passes = widget.locator("button.widget-event")
        assert passes.count() == TRAIN_CELL.count(".backward()")
        passes.nth(1).click()
        page.wait_for_function("""el => el.querySelector('button.widget-event:nth-child(2)')
            .getAttribute('aria-pressed') === 'true'""",
                               arg=widget.element_handle())
        # the second pass as PyTorch builds it: its grad_fns, AccumulateGrad aside
        out = ns["model"].head(ns["x"]).pow(2).sum()
        ops = sorted(type(f).__name__ for f in grad_fns(out.grad_fn)
                     if type(f).__name__ != "AccumulateGrad")
        graph = widget.locator(".widget-graph svg")
        graph.locator("g.node", has_text="PowBackward0").wait_for()
        drawn = graph.locator("g.node.kind-op")
        assert sorted(_named(drawn.nth(i).get_attribute("aria-label"))
                      for i in range(drawn.count())) == ops
        assert graph.locator("g.node.kind-fold").count() == 0
        _shot(page, "jupyterlab-widget-second-pass.png")
        passes.nth(0).click()
        graph.locator("g.node.kind-fold").wait_for()
    except Exception:
        _shot(page, "jupyterlab-widget-events-failed.png")
        raise


def test_opening_a_fold_shows_its_blocks(controls):
    page, widget = controls
    try:
        layers = _plain_model()["model"].encoder.layers
        graph = widget.locator(".widget-graph svg")
        fold = graph.locator("g.node.kind-fold")
        assert fold.count() == 1
        assert f"encoder.layers.0-{len(layers) - 1} × {len(layers)}" in fold.text_content()
        fold.click()
        blocks = graph.locator("g.node.kind-module")
        blocks.first.wait_for()
        names = sorted(_named(blocks.nth(i).get_attribute("aria-label"))
                       for i in range(blocks.count()))
        assert names == sorted(f"encoder.layers.{i}" for i in range(len(layers)))
        assert graph.locator("g.node.kind-fold").count() == 0
        _shot(page, "jupyterlab-widget-fold-open.png")
        # and a block opens into its own layers, themselves repeated: a fold of them
        block = graph.locator("g.node.kind-module[aria-label^='encoder.layers.0,']")
        block.click()
        block.wait_for(state="detached")
        lins = layers[0].lins
        inner = graph.locator("g.node.kind-fold")
        inner.wait_for()
        assert f"encoder.layers.0.lins.0-{len(lins) - 1} × {len(lins)}" in inner.text_content()
        assert graph.locator("g.node.kind-module").count() == len(layers) - 1
        widget.locator("button#layout-close").click()
        graph.locator("g.node.kind-fold").wait_for()
    except Exception:
        _shot(page, "jupyterlab-widget-fold-failed.png")
        raise


def test_a_tall_graph_opens_on_its_loss_and_the_parameters_nearest_it_whole(controls):
    page, _ = controls
    try:
        deep = page.locator(f"{_shown(page)} .autograd-lab-widget").nth(1)
        page.evaluate(SCROLL_TO_LAST)
        graph = deep.locator(".widget-graph")
        graph.locator("svg g.node").first.wait_for()
        graph.evaluate("el => el.scrollIntoView({block: 'center'})")
        area = _box_of(graph)
        # as tall as the window allows (80% of its 1000 px), not the 300 px that cropped
        assert 700 <= area["height"] <= 800 + 1
        # the loss, whole, and the last layer's weight and bias (the parameters nearest it:
        # PyTorch's module names for them)
        import torch

        chain = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(40)])
        last = [n for n, _ in chain.named_parameters() if n.startswith(f"{len(chain) - 1}.")]
        assert len(last) == 2
        assert _inside(_box_of(graph.locator("svg g.node.kind-output")), area)
        for name in last:
            node = graph.locator(f"svg g.node.kind-param[aria-label^='chain.{name} (']")
            assert _inside(_box_of(node), area), name
        # at labels of 7 px or more on screen
        sizes = graph.evaluate("""el => [...el.querySelectorAll('svg g.node text[font-size]')]
            .map((t) => parseFloat(t.getAttribute('font-size')) * t.getScreenCTM().a)""")
        assert min(sizes) >= 7 - 0.01
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-widget-tall.png"))
    except Exception:
        _shot(page, "jupyterlab-widget-tall-failed.png")
        raise
