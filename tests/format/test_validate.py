"""The one validator: what the tracer writes passes; a document wrong in any part the web layer
reads is refused with a message naming the part. The worker's report is written by the script's
own process, so this is the check between a hostile script and everyone's pages."""

from __future__ import annotations

import copy

import jsonschema
import pytest

from app.format import FORMAT, InvalidTrace, load_schema, new_document, validate


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    from app.trace.tracer import trace_script

    path = tmp_path_factory.mktemp("script") / "script.py"
    path.write_text("""
import torch
w = torch.nn.Parameter(torch.randn(3, 2))
x = torch.randn(4, 3)
loss = (x @ w).tanh().sum() + (w * w).sum()
loss.backward()
torch.optim.SGD([w], lr=0.1).step()
""")
    return trace_script(path)


def test_what_the_tracer_writes_is_valid_for_both_validators(doc):
    validate(doc)
    jsonschema.validate(doc, load_schema())  # the independent implementation agrees
    validate(new_document("empty.py", "", "cpu", None))


def _backward(doc):
    return next(e for e in doc["events"] if e["kind"] == "backward")


BREAKS = {
    "format": lambda d: d.update(format="autograd-lab/trace@2"),
    "script": lambda d: d["script"].update(sha256="not hex"),
    "event kind": lambda d: d["events"][0].update(kind="forward"),
    "node kind": lambda d: _backward(d)["graph"]["nodes"][0].update(kind="script"),
    "node id": lambda d: _backward(d)["graph"]["nodes"][0].update(id=7),
    "edge slot": lambda d: _backward(d)["graph"]["edges"][0].update(slot=-1),
    "edge source": lambda d: _backward(d)["graph"]["edges"][0].pop("source"),
    "contribution": lambda d: _backward(d)["contributions"].update(w=[{"node": "n1"}]),
    "number": lambda d: _backward(d)["graph"]["edges"][0].update(grad_norm="a lot"),
    "error": lambda d: d.update(error={"type": "X"}),
    "diagnostic level": lambda d: d["diagnostics"].append(
        {"code": "x", "level": "fatal", "message": "", "params": [], "nodes": []}),
    "params": lambda d: d.update(params=[]),
}


@pytest.mark.parametrize("part", BREAKS)
def test_a_broken_part_is_refused(doc, part):
    broken = copy.deepcopy(doc)
    BREAKS[part](broken)
    with pytest.raises(InvalidTrace):
        validate(broken)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, load_schema())


def test_not_a_document_at_all_is_refused():
    for thing in (None, [], "trace", {"format": FORMAT}):
        with pytest.raises(InvalidTrace):
            validate(thing)


def test_deep_nesting_is_refused_not_a_crash():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    broken = new_document("x.py", "", "cpu", None)
    broken["params"] = {"w": {"shape": [1], "dtype": "float32", "device": "cpu",
                              "requires_grad": True, "grad": {"shape": [1], "dtype": "f",
                                                              "device": "cpu", "values": deep}}}
    with pytest.raises(InvalidTrace):
        validate(broken)


def _with_grad_values(values) -> dict:
    doc = new_document("x.py", "", "cpu", None)
    doc["params"] = {"w": {"shape": [2], "dtype": "float32", "device": "cpu",
                           "requires_grad": True, "grad": {"shape": [2], "dtype": "float32",
                                                           "device": "cpu", "values": values}}}
    return doc


@pytest.mark.parametrize("values", [[1.5, "NaN"], [["Infinity"], ["-Infinity", 0]], 2.0, "NaN"])
def test_numbers_json_cannot_write_are_strings_both_validators_accept(values):
    doc = _with_grad_values(values)
    validate(doc)
    jsonschema.validate(doc, load_schema())


@pytest.mark.parametrize("values", [["nan"], ["NaN", "Infinityy"], [True], [None], [{"a": 1}],
                                    ["<script>alert(1)</script>"], [[1.0, "x" * 5000]]])
def test_anything_else_among_values_is_refused_by_both_and_not_echoed(values):
    """The schema writes these without oneOf, for speed (schema.py): the same documents are
    refused as by the reference validator, and the message names the place, not the value."""
    doc = _with_grad_values(values)
    with pytest.raises(InvalidTrace) as refused:
        validate(doc)
    assert "data.params.w.grad" in str(refused.value), refused.value
    assert "<script>" not in str(refused.value) and "xxxx" not in str(refused.value)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, load_schema())


def test_a_refusal_never_quotes_the_scripts_own_names_at_length(doc):
    """Property names are the script's too: a megabyte name, or markup as a name where the
    schema allows no other property, is not repeated back (the message is the server's)."""
    long_name = copy.deepcopy(doc)
    long_name["params"]["w" * 1_000_000] = {"shape": "not a shape"}
    extra = copy.deepcopy(doc)
    _backward(extra)["gradcheck"] = {"check": "gradcheck", "passed": True, "message": "",
                                     "function": "f", "line": None, "<img src=x>": 1}
    for broken in (long_name, extra):
        with pytest.raises(InvalidTrace) as refused:
            validate(broken)
        said = str(refused.value)
        assert len(said) < 500 and "<img" not in said and "w" * 100 not in said, said[:200]
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, load_schema())
