"""An uploaded notebook as one script (app/format/notebook.py): each cell's lines where the map
says they are, IPython-only lines skipped without breaking a block, a cell magic's cell skipped
whole, outputs ignored, and a clear error for what is not a notebook."""

from __future__ import annotations

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
    script_from_notebook,
    where,
)

CELLS = [
    new_markdown_cell("# A lesson\nsome words"),
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
    doc = new_document("lesson.py", nb.source, "cpu", None)
    annotate(doc, nb.document_part("lesson.ipynb"))
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
