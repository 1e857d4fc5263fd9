"""A fresh worker loads matplotlib before its sandbox closes only for a script that may import
it (preload.py, issue 36: 0.6 s of CPU that a plain run of a torch-only script never pays);
figures are kept as before, and a script that imports matplotlib in a way the source does not
show still gets it, and its figures are kept as a plain import's are (on_import.py)."""

from __future__ import annotations

import base64
import subprocess
import sys

import pytest

from app.runner import trace_in_sandbox
from app.runner.preload import needs_plotting, needs_warm_up

TORCH_ONLY = """\
import sys
import torch
w = torch.ones(2, requires_grad=True)
(w * w).sum().backward()
print([m for m in sys.modules if m.startswith("matplot")])  # (the word itself would count)
"""


@pytest.mark.parametrize("source", [
    "import matplotlib.pyplot as plt\n",
    "from matplotlib import pyplot\n",
    "import pylab\n",
    "import seaborn as sns\n",  # not the standard library's, torch's or numpy's: may draw
    "import my_helpers\n",
    "from . import data\n",
    "import importlib\nplt = importlib.import_module('matplotlib.pyplot')\n",
    "def broken(:\n",
])
def test_a_script_that_may_draw_gets_matplotlib_first(source):
    assert needs_plotting(source)


@pytest.mark.parametrize("source", [
    TORCH_ONLY,
    "import math, random\nimport numpy as np\nfrom torch import nn\nfrom tqdm import tqdm\n",
    "from __future__ import annotations\nimport torch.nn.functional as F\n",
])
def test_a_torch_only_script_does_not(source):
    assert not needs_plotting(source)


def test_a_torch_only_run_has_no_matplotlib_as_a_plain_run_has_none(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(TORCH_ONLY)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           check=True)
    doc = trace_in_sandbox(source=TORCH_ONLY, name="plain.py", timeout=60)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == plain.stdout == "[]\n"


def test_a_drawing_script_still_has_its_figure_kept():
    doc = trace_in_sandbox(source="import matplotlib.pyplot as plt\nimport torch\n"
                           "w = torch.ones(2, requires_grad=True)\n(w * w).sum().backward()\n"
                           "plt.figure(figsize=(4, 2))\nplt.plot([1, 2])\nplt.show()\n",
                           name="draw.py", timeout=60)
    assert doc["error"] is None, doc["error"]
    assert [(f["via"], f["width"], f["height"]) for f in doc["figures"]] == \
        [("show", 400, 200)]  # 4 x 2 inches at 100 dpi


def test_matplotlib_imported_out_of_sight_still_draws_in_the_sandbox():
    source = ("import importlib, io\nimport torch\n"
              "plt = importlib.import_module('matp' + 'lotlib.pyplot')\n"
              "fig = plt.figure()\nplt.plot([0, 1], label='a line')\nplt.legend()\n"
              "buf = io.BytesIO()\nfig.savefig(buf, format='png')\n"
              "print(buf.getvalue()[:8] == b'\\x89PNG\\r\\n\\x1a\\n')\n"
              "w = torch.ones(2, requires_grad=True)\n(w * w).sum().backward()\n")
    assert not needs_plotting(source)
    doc = trace_in_sandbox(source=source, name="hidden.py", timeout=60)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == "True\n", doc["stderr"][-2000:]


DRAWING = ("plt.figure(figsize=(4, 2))\nplt.plot([1, 2], label='a line')\nplt.legend()\n"
           "plt.show()\nw = torch.ones(2, requires_grad=True)\n(w * w).sum().backward()\n")


@pytest.mark.parametrize("hidden", [
    "plt = importlib.import_module('matp' + 'lotlib.pyplot')",
    "plt = __import__('matp' + 'lotlib.pyplot', fromlist=['show'])",
])
def test_a_hidden_import_keeps_its_figure_as_plain_matplotlib_draws_it(hidden):
    source = f"import importlib\nimport torch\n{hidden}\n" + DRAWING
    assert not needs_plotting(source)  # the worker starts without matplotlib
    doc = trace_in_sandbox(source=source, name="hidden.py", timeout=60)
    assert doc["error"] is None, doc["error"]
    # the same figure drawn by matplotlib itself, outside autograd-lab, at 100 dpi
    plain = subprocess.run(
        [sys.executable, "-c", "import io, sys, matplotlib\nmatplotlib.use('Agg')\n"
         "import matplotlib.pyplot as plt\nimport torch\n" + DRAWING.replace("plt.show()\n", "")
         + "buf = io.BytesIO()\nplt.gcf().savefig(buf, format='png', dpi=100)\n"
         "sys.stdout.buffer.write(buf.getvalue())\n"], capture_output=True, check=True)
    assert [(f["via"], f["line"]) for f in doc["figures"]] == [("show", 7)]  # plt.show()
    assert base64.b64decode(doc["figures"][0]["png"]) == plain.stdout
    # and a plain import, preloaded, keeps the very same
    preloaded = trace_in_sandbox(source="import matplotlib.pyplot as plt\nimport torch\n"
                                 + DRAWING, name="plain.py", timeout=60)
    assert [base64.b64decode(f["png"]) for f in preloaded["figures"]] == [plain.stdout]


TORCHVIZ = """\
import torch
from torchviz import make_dot
w = torch.ones(2, requires_grad=True)
y = (w * w).sum()
dot = make_dot(y, params={"w": w})
print(type(dot).__name__, sum("->" in line for line in dot.body), len(dot.body))
y.backward()
print(w.grad)
"""


def test_torchviz_left_out_of_the_worker_is_imported_in_the_sandbox_and_recorded(tmp_path):
    pytest.importorskip("torchviz")
    assert not needs_plotting(TORCHVIZ)  # a worker without matplotlib, nor torchviz first
    script = tmp_path / "viz.py"
    script.write_text(TORCHVIZ)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           check=True)
    doc = trace_in_sandbox(source=TORCHVIZ, name="viz.py", timeout=60)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == plain.stdout  # torchviz drew the same picture, w.grad the same
    assert [(v["kind"], v["line"], v["names"]) for v in doc["views"]] == \
        [("make_dot", 5, ["w"])]


OPTIMIZER_OUT_OF_SIGHT = """\
import torch
rules = getattr(torch, "op" + "tim")
w = torch.nn.Parameter(torch.ones(3))
opt = rules.Adam([w], lr=0.1)
for _ in range(3):
    opt.zero_grad()
    (w * w).sum().backward()
    opt.step()
print(w.detach())
twice_sin = getattr(torch, "com" + "pile")(lambda x: x.sin() * 2)
print(twice_sin(torch.ones(2)))
"""


@pytest.mark.parametrize("source", [
    "import torch\nopt = torch.optim.SGD([w], lr=0.1)\n",
    "from torch.optim.lr_scheduler import StepLR\n",
    "import torch\nf = torch.compile(f)\n",
    "import my_helpers\n",
    "def broken(:\n",
])
def test_a_script_that_may_step_an_optimizer_gets_the_warm_up(source):
    assert needs_warm_up(source)


def test_an_optimizer_the_source_hides_runs_in_the_sandbox_as_plainly(tmp_path):
    assert not needs_warm_up(OPTIMIZER_OUT_OF_SIGHT) and not needs_warm_up(TORCH_ONLY)
    script = tmp_path / "hidden_adam.py"
    script.write_text(OPTIMIZER_OUT_OF_SIGHT)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           check=True)
    doc = trace_in_sandbox(source=OPTIMIZER_OUT_OF_SIGHT, name="hidden_adam.py", timeout=120)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == plain.stdout  # Adam's steps and the compiled function's result
    assert sum(e["kind"] == "step" for e in doc["events"]) == 3, doc["events"]
