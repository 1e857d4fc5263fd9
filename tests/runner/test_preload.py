"""A fresh worker loads matplotlib before its sandbox closes only for a script that may import
it (preload.py, issue 36: 0.6 s of CPU that a plain run of a torch-only script never pays);
figures are kept as before, and a script that imports matplotlib in a way the source does not
show still gets it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.runner import trace_in_sandbox
from app.runner.preload import needs_plotting

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
