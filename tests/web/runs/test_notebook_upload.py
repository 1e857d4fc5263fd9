"""An uploaded .ipynb against a real uvicorn on loopback (issue 22): a notebook of three cells,
one with a `!pip` line, runs in the sandbox as one namespace; its nodes' lines map to "cell N,
line M" in the Trace and on the run's page, the skipped line is named, and what is not a
notebook gets a 422 that says what to do."""

from __future__ import annotations

import ast
import html
import json
import re

import httpx
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tests.server import serve

TOKEN = "nb-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CELLS = [
    "import torch\nw = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)",
    "!pip install torchviz\nx = torch.tensor([4.0, 5.0, 6.0])",
    "y = w * x\nloss = (y * y).sum()\nloss.backward()\nprint(w.grad.tolist())",
]


def notebook_text() -> str:
    cells = [new_code_cell(source) for source in CELLS]
    cells[1].outputs = [new_output("stream", text="Requirement already satisfied\n")]
    return nbformat.writes(new_notebook(cells=cells))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="notebook-server", TOKEN=TOKEN,
               POOL_SIZE="1", TRACE_TIMEOUT="60") as url:
        yield url


def upload(base: str, data: bytes, filename: str = "scenario.ipynb") -> httpx.Response:
    return httpx.post(base + "/api/runs", files={"file": (filename, data)}, headers=AUTH,
                      timeout=90)


def test_a_notebook_traces_with_its_cells(base):
    response = upload(base, notebook_text().encode())
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["error"] is None, doc["error"]
    # one namespace: cell 3 used cell 1's w and cell 2's x, and printed the .grad that torch
    # gives for the cells' code run here
    here: dict = {}
    exec("\n".join(CELLS).replace("!pip install torchviz\n", ""), here)
    assert doc["stdout"].strip() == str(here["w"].grad.tolist())
    notebook = doc["script"]["notebook"]
    assert notebook["name"] == "scenario.ipynb"
    # the script line of `loss = (y * y).sum()`, found in the script that ran
    line = doc["script"]["source"].splitlines().index("loss = (y * y).sum()") + 1
    (cell3,) = [c for c in notebook["cells"] if c["cell"] == 3]
    assert line - cell3["first"] + 1 == 2  # the map names it cell 3, line 2
    (event,) = [e for e in doc["events"] if e["kind"] == "backward"]
    made = {n["name"] for n in event["graph"]["nodes"] if n.get("line") == line}
    assert {"MulBackward0", "SumBackward0"} <= made, made
    # the skipped line is named where the page lists the run's findings
    (note,) = [d for d in doc["diagnostics"] if d["code"] == "ipython_lines_skipped"]
    assert "cell 2, line 1 `!pip install torchviz`" in note["message"]

    page = httpx.get(base + doc["run"]["link"], timeout=10)
    assert page.status_code == 200
    assert "scenario.ipynb" in page.text
    for n in (1, 2, 3):
        assert f'id="cell-{n}">cell {n}</li>' in page.text
    item = re.search(rf'<li id="L{line}" data-line="{line}" value="(\d+)" data-cell="(\d+)"',
                     page.text)
    assert item and item.groups() == ("2", "3")
    assert "skipped: IPython only" in page.text and "!pip install torchviz" in page.text


def test_a_notebook_as_json_source_is_known_by_its_content(base):
    response = httpx.post(base + "/api/runs", json={"source": notebook_text()}, headers=AUTH,
                          timeout=90)
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["error"] is None and doc["script"]["notebook"]["name"] == "notebook.ipynb"
    assert doc["script"]["name"] == "notebook.py"  # the run folder's file is a script


@pytest.mark.parametrize(("data", "says"), [
    (notebook_text().encode()[:200], "not valid JSON"),  # cut short
    (b'{"title": "my notes", "items": [1, 2]}', "not a Jupyter notebook"),
    (nbformat.writes(new_notebook(cells=[new_markdown_cell("words")])).encode()
     .replace(b'"cell_type": "markdown"', b'"cell_type": "picture"'),
     "does not follow the notebook format"),
])
def test_what_is_not_a_notebook_is_a_clear_422(base, data, says):
    response = upload(base, data)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert says in detail and "save it again from Jupyter" in detail


def with_big_outputs() -> tuple[str, list]:
    """The three cells, their outputs as a course notebook keeps them: 300 KiB of figures and
    printed lines, past the 64 KiB a script may be, beside a few hundred bytes of code."""
    cells = [new_code_cell(source) for source in CELLS]
    cells[1].outputs = [new_output("stream", text="Requirement already satisfied\n" * 3000)]
    cells[2].outputs = [new_output("display_data", data={"image/png": "iVBORw0KGgo" * 20_000}),
                        new_output("stream", text="[0.0, 0.0, 0.0]\n")]
    return nbformat.writes(new_notebook(cells=cells)), cells


def test_a_notebook_whose_outputs_are_past_the_script_limit_runs(base):
    text, cells = with_big_outputs()
    assert len(text) > 300 * 1024 and sum(len(c.source) for c in cells) < 1024
    here: dict = {}
    exec("\n".join(CELLS).replace("!pip install torchviz\n", ""), here)
    for response in (upload(base, text.encode()),  # a file, and its JSON as the page sends it
                     httpx.post(base + "/api/runs", json={"source": text, "name": "big.ipynb"},
                                headers=AUTH, timeout=90)):
        assert response.status_code == 200, response.text
        doc = response.json()
        assert doc["error"] is None, doc["error"]
        assert doc["stdout"].strip() == str(here["w"].grad.tolist())


def test_a_notebook_past_its_own_bound_asks_to_clear_its_outputs(base):
    cells = [new_code_cell("x = 1")]
    cells[0].outputs = [new_output("stream", text="y" * (4 * 2**20 + 1))]
    response = upload(base, nbformat.writes(new_notebook(cells=cells)).encode())
    assert response.status_code == 413, response.text
    detail = response.json()["detail"]
    assert "larger than 4 MiB as saved" in detail and "Clear Outputs" in detail
    # a body past what any script or notebook could take is refused as it arrives
    response = upload(base, b"y" * (9 * 2**20))
    assert response.status_code == 413, response.text
    detail = response.json()["detail"]
    assert "a script may be 64 KiB, a notebook 4 MiB" in detail and "Clear Outputs" in detail


def test_a_notebook_whose_code_is_past_the_script_limit_says_so(base):
    code = "\n".join(f"x{i} = {i}" for i in range(8000))  # ~90 KiB of code, no outputs
    response = upload(base, nbformat.writes(new_notebook(cells=[new_code_cell(code)])).encode())
    assert response.status_code == 413, response.text
    assert "the notebook's code is larger than 64 KiB" in response.json()["detail"]


def test_a_notebook_nested_too_deep_is_a_clear_422_and_the_next_upload_runs(base):
    # valid JSON (json reads it) nested 950 deep in its metadata: nbformat's reading recursed
    # out of the stack there, and the upload got a 500
    data = json.loads(notebook_text())
    data["metadata"]["deep"] = "DEEP"
    deep = json.dumps(data).replace('"DEEP"', '{"a": ' * 950 + "{}" + "}" * 950)
    response = upload(base, deep.encode())
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "nested more than" in detail and "Clear Outputs" in detail
    after = upload(base, notebook_text().encode())
    assert after.status_code == 200 and after.json()["error"] is None, after.text


# a string may hold U+2028 (and \x0c, \x85, ...): Python and Jupyter end lines only at \n, \r\n
# and \r, where str.splitlines() would also break the string in two
ODD_CELLS = [
    new_markdown_cell("a string with a line separator in it"),
    new_code_cell('import torch\ns = "a\u2028b\x0c\x85c"\n\x0cw = torch.tensor([1.0, 2.0], '
                  "requires_grad=True)"),
    new_code_cell("scale = float(len(s))\nloss = (w * scale).sum()\nloss.backward()\n"
                  "print(w.grad.tolist())"),
]


def test_a_cell_with_a_line_separator_in_a_string_runs_and_its_lines_are_its_cells(base):
    response = upload(base, nbformat.writes(new_notebook(cells=ODD_CELLS)).encode())
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["error"] is None, doc["error"]
    here: dict = {}
    exec("\n".join(c.source for c in ODD_CELLS[1:]), here)  # the cells as Python runs them
    assert doc["stdout"].strip() == str(here["w"].grad.tolist())
    # Python's own numbers: `loss = ...` is line 2 of cell 3, and which line of the script ran
    (cell_loss,) = [n.lineno for n in ast.parse(ODD_CELLS[2].source).body
                    if isinstance(n, ast.Assign) and n.targets[0].id == "loss"]
    (line,) = [n.lineno for n in ast.parse(doc["script"]["source"]).body
               if isinstance(n, ast.Assign) and n.targets[0].id == "loss"]
    (event,) = [e for e in doc["events"] if e["kind"] == "backward"]
    (node,) = [n for n in event["graph"]["nodes"] if n["name"] == "SumBackward0"]
    assert node["line"] == line
    (cell3,) = [c for c in doc["script"]["notebook"]["cells"] if c["cell"] == 3]
    assert line - cell3["first"] + 1 == cell_loss == 2

    page = httpx.get(base + doc["run"]["link"], timeout=10).text
    item = re.search(rf'<li id="L{line}" data-line="{line}" value="(\d+)" data-cell="(\d+)"',
                     page)
    assert item and item.groups() == (str(cell_loss), "3")
    shown = page[page.index(">", item.end()) + 1:page.index("</li>", item.end())]
    assert html.unescape(re.sub(r"<[^>]+>", "", shown)).strip() == "loss = (w * scale).sum()"
    assert page.count('data-line="') == len(doc["script"]["source"].split("\n")) - 1
    # the drawing's tooltips say the node's place the same way
    svg = httpx.get(f"{base}/api/runs/{doc['run']['id']}/graph.svg", timeout=60).text
    assert re.search(rf'id="{node["id"]}"[^>]*>.*?xlink:title="SumBackward0 [^"]*cell 3, '
                     rf'line {cell_loss}"', svg, re.S), svg[:2000]
    assert f"line {line}\"" not in svg


# a course notebook's training step, traced in Jupyter by the extension's cell magic
STEP_CELLS = [
    new_code_cell("import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(3, 2)\n"
                  "x = torch.randn(4, 3)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)"),
    new_code_cell("%load_ext autograd_lab"),
    new_markdown_cell("One training step:"),
    new_code_cell("%%autograd_lab --event 0 --layout flat\nopt.zero_grad()\n"
                  "loss = model(x).pow(2).mean()\nloss.backward()\n"
                  "print(model.weight.grad.tolist())\nopt.step()"),
    new_code_cell("print(model.weight.tolist())"),
]


def plainly(cells) -> tuple[dict, str]:
    """The code cells run here as Jupyter runs them, a cell magic's body as IPython hands it
    over (its first line off), and what they printed."""
    import contextlib
    import io

    here: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for cell in cells:
            if cell.cell_type != "code" or cell.source.startswith("%load_ext"):
                continue
            source = cell.source
            if source.startswith("%%"):
                source = source.split("\n", 1)[1]
            exec(source, here)
    return here, out.getvalue()


def test_an_autograd_lab_cell_runs_as_its_body(base):
    response = upload(base, nbformat.writes(new_notebook(cells=STEP_CELLS)).encode(), "step.ipynb")
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["error"] is None, doc["error"]
    here, printed = plainly(STEP_CELLS)
    # the step ran: its backward pass is recorded, its .grad and the step's new weights are
    # what the same code gives run here
    assert doc["stdout"] == printed
    (event,) = [e for e in doc["events"] if e["kind"] == "backward"]
    line = doc["script"]["source"].splitlines().index("loss.backward()") + 1
    (cell,) = [c for c in doc["script"]["notebook"]["cells"] if c["cell"] == 4]
    assert line - cell["first"] + 1 == STEP_CELLS[3].source.splitlines().index(
        "loss.backward()") + 1 == 4  # line 4 of the cell as Jupyter shows it, the magic's 1
    assert event["line"] == line
    assert doc["stdout"].splitlines()[0] == str(here["model"].weight.grad.tolist())
    (note,) = [d for d in doc["diagnostics"] if d["code"] == "ipython_lines_skipped"]
    assert "cell 4, line 1 `%%autograd_lab --event 0 --layout flat` (its body ran" in \
        note["message"]


def test_an_error_in_an_autograd_lab_cell_names_the_cells_line(base):
    cells = [*STEP_CELLS[:3], new_code_cell(
        "%%autograd_lab\nloss = model(x).pow(2).mean()\nloss.backward()\nloss.backward()")]
    response = upload(base, nbformat.writes(new_notebook(cells=cells)).encode(), "twice.ipynb")
    assert response.status_code == 200, response.text
    doc = response.json()
    with pytest.raises(RuntimeError) as raised:  # what torch says to the same code, here
        plainly(cells)
    error = doc["error"]
    assert error["type"] == "RuntimeError" and error["message"] == str(raised.value)
    (cell,) = [c for c in doc["script"]["notebook"]["cells"] if c["cell"] == 4]
    # the second backward() is line 4 of cell 4 as the person counts the cell's lines
    assert cells[3].source.splitlines()[3] == "loss.backward()"
    assert error["line"] - cell["first"] + 1 == 4
    # and the explanation's first backward is the cell's line 3
    assert error["explanation"]["line"] - cell["first"] + 1 == 3


# a notebook written for the extension, calling it from Python
API_CELLS = [
    new_code_cell("import torch\nimport autograd_lab\ntorch.manual_seed(0)\n"
                  "w = torch.randn(3, requires_grad=True)"),
    new_code_cell("def step():\n    (w * w).sum().backward()\n\n"
                  "print(autograd_lab.trace(step))\nprint(w.grad.tolist())\n"
                  "autograd_lab.show((w * 3).sum())"),
    new_code_cell("from autograd_lab import show\nshow('AbC123')\n"
                  "try:\n    autograd_lab.fetch_run('AbC123')\nexcept RuntimeError as e:\n"
                  "    print('refused:', e)"),
]


def test_a_notebook_that_uses_autograd_lab_runs_in_the_sandbox(base):
    response = upload(base, nbformat.writes(new_notebook(cells=API_CELLS)).encode(), "api.ipynb")
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["error"] is None, doc["error"]
    # trace() ran the step plainly (its backward is the run's), show(tensor) is a view
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    (w * w).sum().backward()
    out = doc["stdout"].splitlines()
    assert out.count(out[0]) == 1 and "whole notebook is traced" in out[0]  # said once
    assert out[1:3] == ["None", str(w.grad.tolist())]
    assert [e["kind"] for e in doc["events"]] == ["backward"]
    assert [v["kind"] for v in doc["views"]] == ["make_dot"]
    # a stored run is not fetched: the sandbox reaches no server, and says so
    assert "autograd_lab.show('AbC123'): a stored run is fetched from a server" in out[3]
    assert out[4].startswith("refused: autograd_lab.fetch_run('AbC123') fetches a stored run")
