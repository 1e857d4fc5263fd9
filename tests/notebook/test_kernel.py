"""`%load_ext autograd_lab` in a real Jupyter kernel (this venv's python), run by nbclient."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
import torch

from tests.trace_facts import backward_events, contribution_sum

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.slow  # starts a kernel process
ROOT = Path(__file__).resolve().parents[2]
TRACE = "application/vnd.autograd-lab.trace+json"
KERNEL = "autograd-lab-test"

MODEL = """\
import json, torch, autograd_lab
from torch import nn
torch.manual_seed(0)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.head = nn.Linear(3, 3), nn.Linear(3, 1)

    def forward(self, x):  # lin used twice: two uses to sum into each of its grads
        return self.head(torch.tanh(self.lin(torch.tanh(self.lin(x)))))

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(6, 3), torch.randn(6, 1)
"""

STEP = """\
%%autograd_lab --name one_step --whole
opt.zero_grad()
loss = nn.functional.mse_loss(model(x), y)
loss.backward()
opt.step()
print("trained", round(loss.item(), 4))
"""

INPLACE = """\
print("before the failure")
h = torch.sigmoid(model.lin(x))
h.add_(1)
h.sum().backward()
"""

CELLS = [
    "%load_ext autograd_lab",
    MODEL,
    STEP,
    "print(json.dumps({n: p.grad.tolist() for n, p in model.named_parameters()}))",
    "autograd_lab.show(loss)",
    # torchviz's own walk of the same tensor, in the kernel (tests/trace compares the same way)
    "from tests.trace.test_torchviz_agreement import torchviz_walk\n"
    "print(json.dumps(dict(torchviz_walk(loss)[0])))",
    "%%autograd_lab\nmodel(torch.randn(2, 7))  # the wrong width: the cell raises",
    "print('still here', 1 + 1)",
    # an in-place change autograd needs undone, traced (8), then the same lines plainly (9),
    # whose first line stands where the magic's does, so that IPython counts the same lines
    "%%autograd_lab --name inplace\n" + INPLACE,
    "# the same lines, plainly\n" + INPLACE,
    # the step again, stored bounded (10), and .grad's norms as the kernel holds them (11)
    "%%autograd_lab --name bounded\n" + STEP.split("\n", 1)[1],
    "print(json.dumps({n: p.grad.norm().item() for n, p in model.named_parameters()}))",
]
RAISES = {9}  # cells that fail plainly, as PyTorch fails them (tagged so that the run goes on)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook above, run top to bottom on a kernel whose spec lives in a temp folder
    (nothing in the home folder: Jupyter's and IPython's folders are all temp ones)."""
    tmp = tmp_path_factory.mktemp("kernel")
    with kernel_installed(tmp):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(src, metadata={"tags": ["raises-exception"]}
                                              if i in RAISES else {})
                    for i, src in enumerate(CELLS)]
        client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=300,
                                         store_widget_state=True,
                                         resources={"metadata": {"path": str(tmp)}})
        client.execute()
    nbformat.validate(nb)
    return nb


@contextlib.contextmanager
def kernel_installed(tmp: Path):
    """This venv's python as kernel KERNEL, its spec and every Jupyter and IPython folder in
    `tmp` (nothing in the home folder), for the duration of the block."""
    env = {"JUPYTER_PATH": str(tmp / "share" / "jupyter"),
           "JUPYTER_DATA_DIR": str(tmp / "data"), "JUPYTER_CONFIG_DIR": str(tmp / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), "IPYTHONDIR": str(tmp / "ipython"),
           "JUPYTER_PLATFORM_DIRS": "1", "MPLBACKEND": "Agg",
           # this checkout first, so the kernel imports the code under test and tests/
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(tmp),
                        "--name", KERNEL], check=True, capture_output=True, timeout=120)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _data(cell, mimetype: str):
    found = [o["data"][mimetype] for o in cell.outputs if mimetype in o.get("data", {})]
    assert len(found) == 1, f"expected one {mimetype} output, got {cell.outputs}"
    return found[0]


def _static(cell) -> dict:
    """The data of the output that holds the Trace: the picture, the summary, the notes."""
    found = [o["data"] for o in cell.outputs if TRACE in o.get("data", {})]
    assert len(found) == 1
    return found[0]


def _stdout(cell) -> str:
    return "".join(o["text"] for o in cell.outputs
                   if o["output_type"] == "stream" and o["name"] == "stdout")


def _shown(cell) -> list[dict]:
    """The cell's outputs as a front end shows them: consecutive stream outputs of one name
    are one (a kernel sends a print's text and its newline as two writes, which its I/O thread
    may flush apart on a busy machine; JupyterLab and nbclient's coalescing join them)."""
    shown: list[dict] = []
    for o in cell.outputs:
        if (o["output_type"] == "stream" and shown and shown[-1]["output_type"] == "stream"
                and shown[-1]["name"] == o["name"]):
            shown[-1] = {**shown[-1], "text": shown[-1]["text"] + o["text"]}
        else:
            shown.append(o)
    return shown


def _svg(cell) -> ET.Element:
    svg = _data(cell, "image/svg+xml")
    return ET.fromstring("".join(svg) if isinstance(svg, list) else svg)


def test_the_magic_records_the_cell_and_its_uses_sum_to_the_kernels_grads(executed):
    step = executed.cells[2]
    doc = _data(step, TRACE)
    assert doc["error"] is None
    assert [e["kind"] for e in doc["events"]] == ["backward", "step"]
    assert _stdout(step).startswith("trained ")  # what the cell printed, shown as usual
    grads = json.loads(_stdout(executed.cells[3]))  # .grad as the kernel holds it
    (event,) = backward_events(doc)
    assert set(event["contributions"]) == set(grads)
    for name, grad in grads.items():
        assert torch.allclose(contribution_sum(event, name),
                              torch.tensor(grad, dtype=torch.float64), atol=1e-6), name
    assert len(event["contributions"]["lin.weight"]) == 2  # the reused layer's two uses
    assert _svg(step).tag.endswith("svg")
    assert "1 backward" in _static(step)["text/plain"]


def test_show_of_a_tensor_walks_the_graph_torchviz_does(executed):
    shown = executed.cells[4]
    (view,) = _data(shown, TRACE)["views"]
    ours = Counter(n["name"] for n in view["graph"]["nodes"] if n["kind"] != "output")
    theirs = Counter(json.loads(_stdout(executed.cells[5])))
    assert ours == theirs
    assert sum(ours.values()) >= 8  # a real graph, not an empty agreement
    params = {n["param"] for n in view["graph"]["nodes"] if n.get("param")}
    assert params == {"lin.weight", "lin.bias", "head.weight", "head.bias"}
    assert _svg(shown).tag.endswith("svg")


def test_a_cell_that_raises_is_said_and_the_kernel_goes_on(executed):
    failed, after = executed.cells[6], executed.cells[7]
    assert not [o for o in failed.outputs if o["output_type"] == "error"]
    doc = _data(failed, TRACE)
    # the cell's own lines: `%%autograd_lab` is line 1, the failing call line 2
    assert doc["error"]["type"] == "RuntimeError" and doc["error"]["line"] == 2
    assert failed.source.split("\n")[1].startswith("model(torch.randn(2, 7))")
    where = f"cell {failed.execution_count}, line 2"
    first = failed.outputs[0]["data"]  # the failure, said before anything else
    assert f"The cell stopped with RuntimeError at {where}" in first["text/plain"]
    assert where in first["text/html"]
    assert _stdout(after) == "still here 2\n"


def _ipython_error_line(cell) -> int:
    """The line IPython's own traceback names in a cell that raised plainly ("Cell In[9],
    line 5"), read from its error output."""
    import re

    (error,) = [o for o in cell.outputs if o["output_type"] == "error"]
    said = re.findall(rf"Cell In\[{cell.execution_count}\], line (\d+)",
                      re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"])))
    assert said, error["traceback"]
    return int(said[-1])


def test_a_failed_cell_says_its_explanation_after_its_prints_on_its_own_lines_no_wall(executed):
    traced, plain = executed.cells[8], executed.cells[9]
    (error,) = [o for o in plain.outputs if o["output_type"] == "error"]
    doc = _data(traced, TRACE)
    assert doc["error"]["type"] == error["ename"] == "RuntimeError"
    # torch's own words, kept; only its hint differs, anomaly mode being on in the traced run
    assert doc["error"]["message"].split(" Hint:")[0] == error["evalue"].split(" Hint:")[0]
    # the line IPython names for the same lines run plainly, in the traced cell's own count
    line = _ipython_error_line(plain)
    assert doc["error"]["line"] == line
    # what the cell printed came first, as it ran; then the failure, before the graph
    outputs = _shown(traced)
    first = outputs[1]
    assert first["output_type"] == "display_data"
    said, page = first["data"]["text/plain"], first["data"]["text/html"]
    assert said.startswith(f"autograd-lab: The cell stopped with RuntimeError at cell "
                           f"{traced.execution_count}, line {line}.")
    # the explanation names the line that changed h in place, counted as the cell shows it
    changed = traced.source.split("\n").index("h.add_(1)") + 1
    assert f"Where: cell {traced.execution_count}, line {changed}" in said
    assert "What happened" in page and "Suggested change" in page and "h.clone()" in page
    # then the graph; no stderr at all: anomaly mode's forward traceback (its 'Error
    # detected in SigmoidBackward0') stays in the Trace
    assert [o["output_type"] for o in outputs] == ["stream", "display_data",
                                                          "display_data", "display_data"]
    assert _stdout(traced) == "before the failure\n"
    assert not [o for o in traced.outputs if o.get("name") == "stderr"]
    assert "Error detected in SigmoidBackward0" in doc["stderr"]
    assert "said above" in outputs[2]["data"]["text/plain"]


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def test_the_magic_shows_the_live_widget_whose_trace_sums_to_the_kernels_grads(executed):
    """The widget's view is in the cell's output; its model's state, as the notebook keeps it,
    holds the Trace gzipped, and that Trace's per-use contributions sum to .grad."""
    pytest.importorskip("anywidget")
    view = _data(executed.cells[2], WIDGET_VIEW)
    models = executed.metadata["widgets"][WIDGET_STATE]["state"]
    model = models[view["model_id"]]
    assert model["model_name"] == "AnyModel"
    (kept,) = [b for b in model["buffers"] if b["path"] == ["trace_gz"]]
    doc = json.loads(gzip.decompress(base64.b64decode(kept["data"])))
    grads = json.loads(_stdout(executed.cells[3]))
    (event,) = backward_events(doc)
    assert model["state"]["event"] == event["index"]
    for name, grad in grads.items():
        assert torch.allclose(contribution_sum(event, name),
                              torch.tensor(grad, dtype=torch.float64), atol=1e-6), name
    # the drawing it opens with has the Trace's node ids (a click finds its record)
    svg = ET.fromstring(model["state"]["svg"])
    drawn = {g.get("id") for g in svg.iter() if g.get("class", "").startswith("node")}
    assert {n["id"] for n in event["graph"]["nodes"]} <= drawn
    # and the static SVG stays in the bundle for what runs no widgets (GitHub, nbviewer)
    assert _svg(executed.cells[2]).tag.endswith("svg")


def _values_in(node) -> int:
    stack, found = [node], 0
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found += "values" in item and "numel" in item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def test_the_stored_trace_is_bounded_and_says_so(executed):
    """Issue 37, point 3: a traced cell's output stores the pass drawn without the tensors'
    values (their statistics stay, true to the kernel's .grad), and says so; --whole keeps
    them."""
    bounded, norms = _data(executed.cells[10], TRACE), json.loads(_stdout(executed.cells[11]))
    assert _values_in(bounded) == 0
    assert _values_in(_data(executed.cells[2], TRACE)) > 0  # --whole
    said = [d for d in bounded["diagnostics"] if d["code"] == "notebook_trace_bounded"]
    assert len(said) == 1 and "--whole" in said[0]["message"]
    assert "stores a smaller Trace" in _static(executed.cells[10])["text/plain"]
    for name, norm in norms.items():  # the statistics kept are .grad's own
        assert abs(bounded["params"][name]["grad"]["norm"] - norm) < 1e-5 * max(1, norm), name


# prints "waiting", then waits until the test, having seen that print arrive, writes the file;
# a kernel that sent the print only when the cell ended would never let it see the file (the
# cell gives up after a minute, only so that a broken run ends)
STREAMED = """\
%%autograd_lab --name streamed
import pathlib, time
w = torch.ones(3, requires_grad=True)
print("waiting", flush=True)
seen = pathlib.Path({flag!r})
for _ in range(600):
    if seen.exists():
        break
    time.sleep(0.1)
print("file seen" if seen.exists() else "gave up waiting")
(w * 2).sum().backward()
"""


def test_what_a_traced_cell_prints_arrives_while_it_runs(tmp_path_factory):
    """Issue 37, point 5: a traced cell's prints stream as a plain cell's do (a training loop's
    progress), not all at its end; its stderr too, and the Trace still keeps both."""
    from jupyter_client.manager import start_new_kernel

    tmp = tmp_path_factory.mktemp("streaming")
    flag = tmp / "the print arrived"
    with kernel_installed(tmp):
        manager, client = start_new_kernel(kernel_name=KERNEL, startup_timeout=120)
    try:
        client.execute_interactive("%load_ext autograd_lab\nimport torch", timeout=300)
        msg_id = client.execute(STREAMED.format(flag=str(flag)))
        printed, trace = [], None
        while True:
            msg = client.get_iopub_msg(timeout=300)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content["name"] == "stdout":
                printed.append(content["text"])
                if "waiting" in "".join(printed):
                    flag.touch()
            elif kind == "display_data" and TRACE in content["data"]:
                trace = content["data"][TRACE]
            elif kind == "status" and content["execution_state"] == "idle":
                break
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert "".join(printed) == "waiting\nfile seen\n"
    assert trace is not None and trace["stdout"] == "waiting\nfile seen\n"
    assert [e["kind"] for e in trace["events"]] == ["backward"]


# issue 37: a figure a traced cell shows is drawn inline as the same cell's is without the magic
# (it was kept only in the Trace); shown by plt.show(), and left open to the kernel's backend
PLOTTED = """\
w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
(w * w).sum().backward()
plt.figure(figsize=(3, 2))
plt.plot(w.grad.tolist())
plt.show()
print("after show")
"""
LEFT_OPEN = "plt.figure(figsize=(3, 2))\n_ = plt.plot([3, 1, 2])\n"
FIGURE_CELLS = [
    "%load_ext autograd_lab",
    "%matplotlib inline\nimport matplotlib.pyplot as plt\nimport torch",
    # the same lines, plainly (2, 4) then traced (3, 5); the magic's line stands where the
    # plain cell's comment does
    "# plainly\n" + PLOTTED,
    "%%autograd_lab --whole\n" + PLOTTED,
    "# plainly\n" + LEFT_OPEN,
    "%%autograd_lab --whole\n" + LEFT_OPEN + "torch.ones(1, requires_grad=True).sum().backward()",
]


def _before_the_trace(cell) -> list[tuple[str, str]]:
    """The cell's outputs up to autograd-lab's own: (output type, a PNG's bytes or the text)."""
    said = []
    for o in _shown(cell):
        data = o.get("data", {})
        if TRACE in data or any("widget" in k for k in data):
            break
        said.append((o["output_type"], data["image/png"] if "image/png" in data else
                     o.get("text", "")))
    return said


def _pngs(cell) -> list[str]:
    return [o["data"]["image/png"] for o in cell.outputs if "image/png" in o.get("data", {})]


def test_a_figure_a_traced_cell_shows_is_drawn_inline_as_the_plain_cell_draws_it(
        tmp_path_factory):
    tmp = tmp_path_factory.mktemp("figures")
    with kernel_installed(tmp):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(src) for src in FIGURE_CELLS]
        nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=300,
                                resources={"metadata": {"path": str(tmp)}}).execute()
    plain, traced = _before_the_trace(nb.cells[2]), _before_the_trace(nb.cells[3])
    # the plain cell: its figure (PyTorch's .grad plotted), then its print
    assert [kind for kind, _ in plain] == ["display_data", "stream"], plain
    assert plain[1][1] == "after show\n"
    assert traced == plain  # the same picture, byte for byte, in the same place
    # and the Trace keeps it too, with the line that showed it
    (figure,) = _data(nb.cells[3], TRACE)["figures"]
    assert figure["via"] == "show" and figure["line"] == PLOTTED.split("\n").index("plt.show()") + 2
    # a figure left open: the kernel's backend shows it after the cell (so after the graph)
    plain, traced = _pngs(nb.cells[4]), _pngs(nb.cells[5])
    assert len(plain) == 1 and traced == plain
    assert "image/png" in nb.cells[5].outputs[-1]["data"]
    (figure,) = _data(nb.cells[5], TRACE)["figures"]
    assert figure["via"] == "open at the end"


def test_a_traced_cell_that_first_imports_pyplot_keeps_and_shows_its_figure(tmp_path_factory):
    # pyplot imported inside the traced cell, for the first time in this kernel: its figures
    # are watched from that import on (app/trace/on_import.py), and shown as the same cell
    # shows them plainly (this kernel's own backend, no `%matplotlib inline`: not at all)
    first = "%%autograd_lab --whole\nimport matplotlib.pyplot as plt\nimport torch\n" + PLOTTED
    tmp = tmp_path_factory.mktemp("first_import")
    with kernel_installed(tmp):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(src) for src in
                    ["%load_ext autograd_lab", first, "# plainly\n" + PLOTTED]]
        nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=300,
                                resources={"metadata": {"path": str(tmp)}}).execute()
    traced, plain = _before_the_trace(nb.cells[1]), _before_the_trace(nb.cells[2])
    assert plain[-1] == ("stream", "after show\n"), plain
    assert traced == plain
    (figure,) = _data(nb.cells[1], TRACE)["figures"]
    assert figure["via"] == "show" and figure["line"] == first.split("\n").index("plt.show()") + 1
