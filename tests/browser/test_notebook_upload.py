"""A notebook uploaded on the "Your own code" page in a real Chromium: it runs as it is, and
the run's page says its lines as "cell N, line M" (the node's details, the source panel with
a heading per cell) and names the skipped `!pip` line."""

from __future__ import annotations

import ast

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from .test_own_code import run_and_read

pytestmark = pytest.mark.browser

CELLS = [
    new_markdown_cell("# Two uses of w"),
    new_code_cell("import torch\nw = torch.tensor([1.0, 2.0], requires_grad=True)"),
    new_code_cell("!pip install torchviz\nx = torch.tensor([3.0, 4.0])"),
    new_code_cell("y = w * x\nloss = (y * w).sum()\nloss.backward()"),
]


def _upload(watched, name: str, cells: list) -> None:
    """The notebook of `cells`, chosen as `name` on the Your-code page, loaded and ready."""
    page = watched.page
    page.goto(watched.base + "/own-code")
    page.set_input_files("#file", files=[{
        "name": name, "mimeType": "application/x-ipynb+json",
        "buffer": nbformat.writes(new_notebook(cells=cells)).encode()}])
    page.wait_for_selector(f"#run-status >> text=Loaded the notebook {name}")
    page.wait_for_selector("#device option[value=cpu]", state="attached")


def test_a_notebook_runs_and_its_lines_are_its_cells(watched):
    page = watched.page
    _upload(watched, "scenario.ipynb", CELLS)
    assert page.input_value("#name") == "scenario.ipynb"
    doc = run_and_read(watched)
    assert page.locator("h1").inner_text() == "Your notebook: scenario.ipynb"
    assert page.locator("#source li.cell-head").all_inner_texts() == ["cell 2", "cell 3", "cell 4"]
    assert "!pip install torchviz" in page.locator("#source li.skipped-line").inner_text()

    line = doc["script"]["source"].splitlines().index("loss = (y * w).sum()") + 1
    event = next(e for e in doc["events"] if e["kind"] == "backward")
    node = next(n for n in event["graph"]["nodes"] if n["name"] == "SumBackward0")
    assert node["line"] == line
    page.click("#zoom-fit")
    page.click(f"#graph g.node#{node['id']}")
    details = page.locator("#details")
    details.locator("text=cell 4, line 2").wait_for()
    assert f"line {line}" not in details.inner_text().replace("cell 4, line 2", "")
    # the run's findings name the skipped line by its cell
    assert "cell 3, line 1" in page.locator("body").inner_text()
    watched.shot("notebook-run")


DOUBLE = ("class Double(torch.autograd.Function):\n"
          "    @staticmethod\n"
          "    def forward(ctx, x):\n"
          "        return x * 2\n\n"
          "    @staticmethod\n"
          "    def backward(ctx, g):\n"
          "        return g * 2\n")
CUSTOM_CELLS = [
    new_markdown_cell("# A Function of our own"),
    new_code_cell("import torch\nw = torch.tensor([1.0, 2.0], requires_grad=True)"),
    new_code_cell(DOUBLE),
    new_code_cell("y = Double.apply(w)\nloss = y.sum()\nloss.backward()"),
]


def test_a_notebook_functions_backward_is_named_by_its_cell(watched):
    page = watched.page
    _upload(watched, "double.ipynb", CUSTOM_CELLS)
    doc = run_and_read(watched)
    event = next(e for e in doc["events"] if e["kind"] == "backward")
    node = next(n for n in event["graph"]["nodes"] if n["kind"] == "custom")
    # where Python says the backward's source starts: its decorator, in cell 3 alone
    (cls,) = [n for n in ast.parse(DOUBLE).body if isinstance(n, ast.ClassDef)]
    (backward,) = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "backward"]
    starts = backward.decorator_list[0].lineno
    script_line = node["backward_source"]["line"]
    assert node["backward_source"]["file"] == "<script>" and script_line != starts
    page.click("#zoom-fit")
    page.click(f"#graph g.node#{node['id']}")
    details = page.locator("#details")
    details.locator(f"h4 >> text=Its backward (cell 3, line {starts})").wait_for()
    details.locator("text=cell 4, line 1").wait_for()  # where Double.apply made the node
    # the drawing's own tooltip names the place the same way
    title = page.locator(f"#graph g.node#{node['id']} a").first.get_attribute("xlink:title")
    assert title and title.endswith("cell 4, line 1"), title
    assert f"line {script_line}" not in details.inner_text().replace(f"line {starts}", "")
    watched.shot("notebook-custom-backward")


# a course notebook as saved: the training step traced by the extension's cell magic, and
# 200 KiB of outputs (past the 64 KiB a script may be) that the page must not refuse
STEP_CELLS = [
    new_code_cell("import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(3, 2)\n"
                  "x = torch.randn(4, 3)"),
    new_markdown_cell("One step, twice:"),
    new_code_cell("%%autograd_lab --event 0\nloss = model(x).pow(2).mean()\nloss.backward()\n"
                  "loss.backward()"),
]


def test_a_saved_notebook_with_an_autograd_lab_cell_says_its_error_by_the_cells_line(watched):
    page = watched.page
    cells = [new_code_cell(c.source) if c.cell_type == "code" else c for c in STEP_CELLS]
    cells[0].outputs = [nbformat.v4.new_output("display_data",
                                               data={"image/png": "iVBORw0KGgo" * 20_000})]
    _upload(watched, "course.ipynb", cells)
    doc = run_and_read(watched)
    # torch's own words for a second backward through a freed graph, at the cell's line 4
    assert doc["error"]["type"] == "RuntimeError"
    assert "backward through the graph a second time" in doc["error"]["message"]
    assert STEP_CELLS[2].source.splitlines()[3] == "loss.backward()"
    body = page.locator("body").inner_text()
    assert "cell 3, line 4" in body, body[:3000]
    watched.shot("notebook-magic-error")
