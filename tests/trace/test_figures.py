"""matplotlib figures a script makes are kept for its run page: shown, saved or still open,
each once, with its line, as a PNG of bounded size; a script in the style of PyTorch's
gradient-flow tutorial runs unchanged and its gradients are recorded as ever (issue 12)."""

from __future__ import annotations

import base64
import io

import pytest
import torch

from tests.trace_facts import backward_events, contribution_sum, diagnostics, values

pytest.importorskip("matplotlib")
from PIL import Image  # noqa: E402 - matplotlib brings Pillow

THREE_WAYS = """\
import os
import matplotlib.pyplot as plt

plt.plot([1, 2, 3])
plt.title("shown")
plt.show()
fig, ax = plt.subplots(figsize=(4, 2))
ax.bar([0, 1], [3, 4])
fig.savefig(os.path.join(os.path.dirname(__file__), "bars.png"))
plt.show()
plt.figure(figsize=(30, 20))
plt.plot([0, 1])
"""


def image(record: dict) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(record["png"])))


def test_shown_saved_and_left_open_figures_are_each_kept_once(trace_source, tmp_path):
    doc = trace_source(THREE_WAYS)
    assert doc["error"] is None or doc["error"]["type"] == "NoGraph"
    got = [(f["via"], f["line"]) for f in doc["figures"]]
    # the bars were saved at line 9 and shown at 10 unchanged: one figure, kept where saved
    assert got == [("show", 6), ("savefig", 9), ("open at the end", None)]
    assert (tmp_path / "bars.png").exists()  # the script's own file is still written
    sizes = [image(f).size for f in doc["figures"]]
    assert sizes == [(f["width"], f["height"]) for f in doc["figures"]]
    assert sizes[1] == (400, 200)  # 4 x 2 inches at 100 dpi
    assert max(sizes[2]) == 1600  # a poster-sized figure is scaled to 1600 px


def test_at_most_twenty_figures_and_the_rest_is_said(trace_source):
    doc = trace_source("import matplotlib.pyplot as plt\nfor i in range(25):\n"
                       "    plt.figure()\n    plt.plot([i])\n    plt.show()\n")
    assert len(doc["figures"]) == 20
    (note,) = diagnostics(doc, "figures_dropped")
    assert note["message"].startswith("5 figure(s) were not kept")


GRADIENT_FLOW = """\
import matplotlib.pyplot as plt
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Sigmoid()) for _ in range(6)])
means = {}


def keep(name):
    def hook(grad):
        means[name] = grad.abs().mean().item()
    return hook


for name, p in model.named_parameters():
    if name.endswith("weight"):
        p.register_hook(keep(name))
loss = model(torch.randn(16, 8)).pow(2).mean()
loss.backward()
plt.bar(range(len(means)), list(means.values()))
plt.xlabel("layer")
plt.ylabel("mean |grad|")
plt.show()
"""


def test_a_gradient_flow_plot_runs_as_pasted_and_its_gradients_are_recorded(trace_source):
    """PyTorch's "Visualizing Gradients" style: hooks on every weight, a bar chart of mean
    |grad| against depth. The chart is kept; the recorded contributions sum to each .grad."""
    doc = trace_source(GRADIENT_FLOW)
    assert doc["error"] is None, doc["error"]
    (ev,) = backward_events(doc)
    assert [(f["via"], f["line"]) for f in doc["figures"]] == [("show", 24)]
    for name, param in doc["params"].items():
        assert torch.allclose(contribution_sum(ev, name), values(param["grad"]), atol=1e-6), name


def test_figures_stay_within_a_total_the_report_can_carry(trace_source):
    """Hard-to-compress figures (noise): each under the 1.5 MB cap, but together they would
    outgrow the worker's 32 MiB report as base64; past 8 MB in all they are said, not kept."""
    doc = trace_source("import numpy as np\nimport matplotlib.pyplot as plt\n"
                       "rng = np.random.default_rng(0)\nfor i in range(12):\n"
                       "    plt.figure(figsize=(6, 6))\n    plt.imshow(rng.random((600, 600, 3)))\n"
                       "    plt.axis('off')\n    plt.show()\n")
    kept = [len(base64.b64decode(f["png"])) for f in doc["figures"]]
    assert kept and all(size <= 1_500_000 for size in kept)
    assert sum(kept) <= 8_000_000
    (note,) = diagnostics(doc, "figures_dropped")
    assert note["message"].startswith(f"{12 - len(kept)} figure(s) were not kept")


# traced in a fresh interpreter, where nothing has imported matplotlib or torchviz yet (as in
# a worker that did not preload them); what it prints after the run is read below
FIRST_IMPORTED_IN_THE_RUN = '''\
import json, sys
from pathlib import Path
from app.trace.tracer import trace_script
doc = trace_script(Path(sys.argv[1]), load_matplotlib=False)
import matplotlib.pyplot as plt
import torchviz, torchviz.dot
from matplotlib.figure import Figure
print(json.dumps({
    "error": doc["error"], "stdout": doc["stdout"],
    "figures": [(f["via"], f["line"], f["width"], f["height"]) for f in doc.get("figures", [])],
    "views": [(v["kind"], v["line"]) for v in doc.get("views", [])],
    # after the run, nothing of ours is left in the interpreter
    "hooks left": [type(f).__module__ for f in sys.meta_path
                   if type(f).__module__.startswith("app.")],
    "patched left": [f.__module__ for f in (plt.show, Figure.savefig, torchviz.make_dot,
                                            torchviz.dot.make_dot)
                     if not f.__module__.startswith(("matplotlib", "torchviz"))]}))
'''
HIDDEN_IMPORTS = """\
import importlib
import torch
plt = importlib.import_module("matp" + "lotlib.pyplot")
make_dot = importlib.import_module("torch" + "viz").make_dot
w = torch.ones(2, requires_grad=True)
y = (w * w).sum()
make_dot(y)
plt.figure(figsize=(4, 2))
plt.plot(w.tolist())
plt.savefig(__file__ + ".png")
y.backward()
print(w.grad)
"""


def test_modules_first_imported_during_the_run_are_watched_then_and_left_as_they_were(
        tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("torchviz")
    script = tmp_path / "hidden.py"
    script.write_text(HIDDEN_IMPORTS)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           check=True)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", FIRST_IMPORTED_IN_THE_RUN, str(script)],
                          capture_output=True, text=True, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["error"] is None and got["stdout"] == plain.stdout
    assert got["figures"] == [["savefig", 10, 400, 200]]  # 4 x 2 inches at 100 dpi
    assert got["views"] == [["make_dot", 7]]
    assert got["hooks left"] == [] and got["patched left"] == []
