"""An uploaded notebook as one script (app/format/notebook.py): each cell's lines where the map
says they are, IPython-only lines skipped without breaking a block, a cell magic's cell skipped
whole, outputs ignored, and a clear error for what is not a notebook."""

from __future__ import annotations

import ast
import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from app.format import new_document, validate
from app.format.notebook import (
    SKIPPED_CODE,
    NotANotebook,
    annotate,
    cell_line,
    listing_rows,
    looks_like_notebook,
    notebook_bound,
    script_from_notebook,
    where,
)

CELLS = [
    new_markdown_cell("# A scenario\nsome words"),
    new_code_cell("import math\n!pip install torchviz\ntotal = 0"),
    new_code_cell("%%bash\necho not python\nls -l"),
    new_code_cell("for i in range(3):\n    %time total += i\n    !echo \\\n        continued\n"
                  "    total += 10\nnote = '''\n!inside a string\n'''\nmath?"),
    new_markdown_cell("more words"),
    new_code_cell("%%time\nsquare = total ** 2"),
]


def notebook(cells=CELLS) -> str:
    return nbformat.writes(new_notebook(cells=cells))


def test_each_cell_line_is_where_the_map_says():
    nb = script_from_notebook(notebook())
    lines = nb.source.splitlines()
    # every line a skip covered (a cell magic's cell, a backslash's next line)
    skipped = {(s["cell"], s["line"] + k) for s in nb.skipped for k in range(s.get("lines", 1))}
    seen = 0
    for number, cell in enumerate(CELLS, start=1):  # numbered by place, markdown included
        if cell.cell_type != "code":
            assert all(c["cell"] != number for c in nb.cells)
            continue
        (entry,) = [c for c in nb.cells if c["cell"] == number]
        own = cell.source.splitlines()
        assert entry["last"] - entry["first"] + 1 == len(own)
        for m, text in enumerate(own, start=1):
            line = entry["first"] + m - 1
            assert cell_line(nb.cells, line) == (number, m)
            assert where(nb.cells, line) == f"cell {number}, line {m}"
            if (number, m) not in skipped:
                assert lines[line - 1] == text
                seen += 1
    assert seen > 5 and len(lines) == sum(c["last"] - c["first"] + 1 for c in nb.cells)


def test_the_script_runs_as_the_cells_would_without_ipython():
    nb = script_from_notebook(notebook())
    namespace: dict = {}
    exec(compile(nb.source, "notebook.py", "exec"), namespace)  # a skipped line in a block
    # the loop's body kept both statements: the %time one ran as itself, the ! one did not
    assert namespace["total"] == sum(i + 10 for i in range(3))
    assert namespace["square"] == namespace["total"] ** 2  # a %%time cell's body ran once
    assert "!inside a string" in namespace["note"]  # a string's line is Python's, not a magic


def test_ipython_lines_are_named_and_a_cell_magic_skips_its_cell():
    nb = script_from_notebook(notebook())
    said = {(s["cell"], s["line"]): s for s in nb.skipped}
    assert said[(2, 2)]["text"] == "!pip install torchviz"
    assert said[(3, 1)]["text"] == "%%bash" and said[(3, 1)]["lines"] == 3
    assert said[(4, 3)]["lines"] == 2  # the backslash carries the next line with it
    assert said[(4, 2)].get("ran") and said[(6, 1)].get("ran")
    assert (4, 9) in said  # `math?`
    assert "echo not python" not in nb.source and "ls -l" not in nb.source
    (bash,) = [c for c in nb.cells if c["cell"] == 3]
    assert nb.source.splitlines()[bash["first"] - 1:bash["last"]] == ["", "", ""]


def test_outputs_are_ignored():
    with_outputs = [new_code_cell(c.source) if c.cell_type == "code" else c for c in CELLS]
    with_outputs[1].outputs = [new_output("stream", text="Successfully installed\n" * 50)]
    with_outputs[1].execution_count = 7
    assert script_from_notebook(notebook(with_outputs)) == script_from_notebook(notebook())


def test_the_trace_carries_the_map_and_the_note():
    nb = script_from_notebook(notebook())
    doc = new_document("scenario.py", nb.source, "cpu", None)
    annotate(doc, nb.document_part("scenario.ipynb"))
    validate(doc)  # the schema takes what the server adds
    note = doc["diagnostics"][0]
    assert note["code"] == SKIPPED_CODE
    assert "cell 2, line 2 `!pip install torchviz`" in note["message"]
    assert "cell 3, line 1 `%%bash` (the whole cell, 3 lines)" in note["message"]
    annotate(doc, None)  # a script's run: a notebook map (a worker's, say) is taken away
    assert "notebook" not in doc["script"]


def test_the_listing_shows_each_cell_with_its_skipped_lines():
    nb = script_from_notebook(notebook())
    rows = listing_rows(nb.document_part("x.ipynb"), nb.source)
    assert [r["cell"] for r in rows if r["head"]] == [2, 3, 4, 6]
    assert rows[1] == {"cell": 2, "at": 2, "head": False, "skipped": "!pip install torchviz"}


@pytest.mark.parametrize(("text", "says"), [
    ('{"cells": [{"cell_type": "code", "sou', "not valid JSON"),
    ('{"hello": "world"}', "not a Jupyter notebook"),
    ("[1, 2, 3]", "not a Jupyter notebook"),
    ('{"cells": [], "nbformat": 4}', "does not follow the notebook format"),
    ('{"cells": [{"cell_type": "code"}], "nbformat": 4, "nbformat_minor": 5, "metadata": {}}',
     "does not follow the notebook format"),
    ('{"cells": [], "nbformat": 99, "nbformat_minor": 0, "metadata": {}}', "cannot read"),
])
def test_what_is_not_a_notebook_is_said(text, says):
    with pytest.raises(NotANotebook) as caught:
        script_from_notebook(text)
    assert says in str(caught.value)
    assert "save it again" in str(caught.value) or "upload" in str(caught.value)


def test_a_notebook_without_python_is_refused():
    empty = notebook([new_markdown_cell("only words"), new_code_cell("!ls\n%matplotlib inline")])
    with pytest.raises(NotANotebook, match="no Python code"):
        script_from_notebook(empty)


def test_a_notebook_is_known_by_its_content():
    assert looks_like_notebook(notebook())
    assert not looks_like_notebook("import torch\n")
    assert not looks_like_notebook(json.dumps({"cells": []}))  # no "nbformat"


def _nested(depth: int) -> str:
    """JSON nested `depth` objects deep, written without recursion."""
    return '{"a": ' * depth + "{}" + "}" * depth


@pytest.mark.parametrize("depth", [150, 500, 900])
@pytest.mark.parametrize("where_in", ["metadata", "output"])
def test_a_notebook_nested_too_deep_is_refused_with_what_to_do(depth, where_in):
    # past a few hundred levels nbformat's reading and schema check recurse out of the stack;
    # json.loads alone gives up only near 1,000
    data = json.loads(notebook([new_code_cell("x = 1")]))
    if where_in == "metadata":
        data["metadata"]["deep"] = "DEEP"
    else:
        data["cells"][0]["outputs"] = [{"output_type": "execute_result", "execution_count": 1,
                                        "metadata": {}, "data": {"application/json": "DEEP"}}]
    text = json.dumps(data).replace('"DEEP"', _nested(depth))
    json.loads(text)  # valid JSON that json itself reads: only the depth is wrong
    with pytest.raises(NotANotebook) as caught:
        script_from_notebook(text)
    said = str(caught.value)
    assert "nested more than" in said and "Clear Outputs" in said and ".py script" in said


def test_a_notebook_nested_as_deep_as_jupyter_writes_is_read():
    data = json.loads(notebook([new_code_cell("x = 1")]))
    data["metadata"]["widgets"] = "DEEP"
    text = json.dumps(data).replace('"DEEP"', _nested(60))
    assert script_from_notebook(text).source == "x = 1\n"


# characters str.splitlines() breaks at that Python keeps inside a line (in a string, or a form
# feed as whitespace); only \n, \r\n and \r end a line, for Python and for Jupyter alike
ODD = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
ODD_CELLS = [
    new_markdown_cell("odd characters"),
    new_code_cell(f's = "a{ODD}b"\n\x0cfirst = len(s)\r\nsecond = 2\rthird = s.count("\\u2028")'),
    new_code_cell('t = "c\u2028d"\nfourth = len(t)'),
]


def test_a_cell_with_odd_line_separators_runs_and_maps_as_python_numbers_it():
    nb = script_from_notebook(notebook(ODD_CELLS))
    namespace: dict = {}
    exec(compile(nb.source, "notebook.py", "exec"), namespace)  # the strings stay whole
    assert namespace["s"] == f"a{ODD}b" and namespace["first"] == len(ODD) + 2
    assert namespace["third"] == 1 and namespace["fourth"] == 3
    # Python's own line numbers: of each assignment in the script, and in the cell alone
    in_script = {n.targets[0].id: n.lineno for n in ast.parse(nb.source).body}
    for number, cell in enumerate(ODD_CELLS, start=1):
        if cell.cell_type != "code":
            continue
        for node in ast.parse(cell.source).body:
            name = node.targets[0].id
            assert cell_line(nb.cells, in_script[name]) == (number, node.lineno), name
    rows = listing_rows(nb.document_part("odd.ipynb"), nb.source)
    assert len(rows) == max(in_script.values())  # one row per line Python counts
    assert (rows[in_script["fourth"] - 1]["cell"], rows[in_script["fourth"] - 1]["at"]) == (3, 2)


def test_cell_line_finds_each_cell_among_many():
    cells, first = [], 1
    for number in range(1, 400, 2):  # every other cell is markdown; cells of 1 to 4 lines
        size = number % 4 + 1
        cells.append({"cell": number, "first": first, "last": first + size - 1})
        first += size
    for c in cells:
        for at in range(1, c["last"] - c["first"] + 2):
            assert cell_line(cells, c["first"] + at - 1) == (c["cell"], at)
    assert cell_line(cells, first) is None and cell_line(cells, 0) is None


def test_outputs_attachments_and_metadata_are_dropped_before_nbformat_reads():
    # what Jupyter and its extensions store beside the code (a widget's state, an image pasted
    # into a markdown cell, a figure, an output no schema knows) never decides what runs
    cleared = [new_code_cell(c.source) if c.cell_type == "code" else c for c in CELLS]
    saved = json.loads(notebook(cleared))
    saved["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"x": 1}}
    saved["cells"][0]["attachments"] = {"a.png": {"image/png": "iVBORw0KGgo=" * 5000}}
    code = saved["cells"][1]
    code["metadata"] = {"tags": ["setup"], "autograd_lab": {"anything": [1, 2]}}
    code["execution_count"] = 3
    code["outputs"] = [{"output_type": "display_data", "data": {"image/png": "A" * 200_000},
                        "metadata": {}},
                       {"output_type": "some_tool_of_its_own", "payload": 1}]  # not nbformat's
    assert script_from_notebook(json.dumps(saved)) == script_from_notebook(notebook(cleared))


MAGIC_CELLS = [
    new_code_cell("w = [1.0, 2.0]"),
    new_markdown_cell("the step, traced in Jupyter"),
    new_code_cell("%%autograd_lab --event 1 --layout modules\n"
                  "total = sum(v * v for v in w)\n%time twice = 2 * total\nhalf = total / 2"),
]


def test_an_autograd_lab_cell_runs_its_body_on_the_cells_own_lines():
    nb = script_from_notebook(notebook(MAGIC_CELLS))
    ran: dict = {}
    exec(nb.source, ran)
    body = MAGIC_CELLS[2].source.split("\n", 1)[1].replace("%time ", "")
    plain: dict = {}
    exec(MAGIC_CELLS[0].source + "\n" + body, plain)  # the cell's body, as IPython hands it over
    assert {k: ran[k] for k in ("total", "twice", "half")} == \
        {k: plain[k] for k in ("total", "twice", "half")}
    script = nb.source.splitlines()
    for at, text in enumerate(MAGIC_CELLS[2].source.splitlines(), start=1):
        if text.startswith("%"):
            continue
        (line,) = [n for n, s in enumerate(script, start=1) if s == text]
        assert cell_line(nb.cells, line) == (3, at)  # the magic's line is the cell's line 1
    (magic,) = [s for s in nb.skipped if s["text"].startswith("%%")]
    assert (magic["cell"], magic["line"]) == (3, 1)
    said = annotate_note(nb)
    assert "cell 3, line 1 `%%autograd_lab --event 1 --layout modules` (its body ran" in said
    assert "`--event 1 --layout modules`, choose what Jupyter draws and are not used" in said


def annotate_note(nb) -> str:
    doc = new_document("m.py", nb.source, "cpu", None)
    annotate(doc, nb.document_part("m.ipynb"))
    (note,) = [d for d in doc["diagnostics"] if d["code"] == SKIPPED_CODE]
    return note["message"]


def test_a_notebook_may_be_as_large_as_a_script_where_scripts_are_larger():
    assert notebook_bound(64 * 1024) == 4 * 2**20
    assert notebook_bound(8 * 2**20) == 8 * 2**20
