"""The widget in a real JupyterLab on loopback, driven by Chromium (issue 22): run all cells of
a notebook that trains one step under %%autograd_lab; the graph appears in the output, a click
on a parameter shows its accumulation bars adding up to .grad, and the replay steps."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .conftest import ARTIFACTS

pytest.importorskip("jupyterlab")
pytest.importorskip("anywidget")
pytestmark = [pytest.mark.browser, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]

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


# the notebook open with all its cells and its kernel started and idle
READY = """cells => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const kernel = w && w.sessionContext && w.sessionContext.session &&
    w.sessionContext.session.kernel;
  return Boolean(w && w.content && w.content.widgets.length === cells && kernel &&
    kernel.status === "idle");
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(base URL, token) of a JupyterLab serving a folder with the notebook above; every
    Jupyter and IPython folder is a temp one."""
    tmp = tmp_path_factory.mktemp("lab")
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [],
                           "execution_count": None} for c in CELLS],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                            "language": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    (tmp / "train.ipynb").write_text(json.dumps(notebook))
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


def test_run_all_then_the_graph_a_parameter_s_bars_and_the_replay(browser, lab):
    base, token = lab
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(90_000)  # a kernel's start and first import of torch
    foreign: list[str] = []
    page.on("request", lambda r: r.url.startswith("http") and not r.url.startswith(base)
            and foreign.append(r.url))
    try:
        page.goto(f"{base}/lab/tree/train.ipynb?token={token}")
        page.wait_for_function(READY, arg=len(CELLS))
        # not awaited: the command's promise ends when every cell has run
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        widget = ".autograd-lab-widget"
        page.wait_for_selector(f"{widget} .widget-graph svg g.node")
        nodes = page.locator(f"{widget} .widget-graph svg g.node")
        assert nodes.count() >= 8
        # a parameter: where its .grad comes from, two uses of the reused layer, adding up
        # (its node may sit where the graph opened panned away from: the click event is sent
        # to it as a tap on it would, without scrolling the notebook to it)
        page.locator(f"{widget} .widget-graph svg g.node.kind-param",
                     has_text="layer.weight").first.dispatch_event("click")
        check = page.locator(f"{widget} .accumulation p.check")
        check.wait_for()
        assert "✓" in check.inner_text()
        assert "Used 2 times" in page.locator(f"{widget} .accumulation").inner_text()
        assert abs(float(check.get_attribute("data-sum")) -
                   float(check.get_attribute("data-grad"))) < 1e-4
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
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-failed.png"))
        raise
    finally:
        context.close()
