"""Each saved tensor's version counter, as torch keeps it: the version a node saved it at and
the one it has when the pass is recorded. Checked against torch's own check, run plainly."""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

CHANGED_AFTER = """
    import torch
    torch.manual_seed(0)
    w = torch.randn(4, 3, requires_grad=True)
    h = torch.tanh(w)  # TanhBackward0 saves its result
    h.mul_(2)          # ... which this changes in place: backward cannot use it
    h.sum().backward()
"""

CHANGED_BEFORE = """
    import torch
    torch.manual_seed(0)
    x = torch.randn(3, requires_grad=True)
    a = x * 1
    a.add_(1)
    a.add_(1)     # two in-place changes, both before ...
    b = a.sin()   # ... SinBackward0 saves it
    b.sum().backward()
"""


def _plain(code: str) -> dict:
    """The script run plainly; `before_backward` is what its last node saved, read before its
    last line (the backward, which frees it)."""
    *body, last = textwrap.dedent(code).strip().splitlines()
    ns: dict = {}
    exec(compile("\n".join(body), "<plain>", "exec", dont_inherit=True), ns)
    raw = getattr(ns[last.split(".")[0]].grad_fn, "_raw_saved_self", None)
    ns["before_backward"] = raw.data._version if raw is not None and raw.data is not None \
        else None
    try:
        exec(compile(last, "<plain>", "exec", dont_inherit=True), ns)
    except RuntimeError as exc:
        ns["error"] = str(exc)
    return ns


def _saved(doc: dict, node_name: str, entry: str) -> dict:
    (event,) = [e for e in doc["events"] if e["kind"] == "backward"]
    (node,) = [n for n in event["graph"]["nodes"] if n["name"] == node_name]
    (saved,) = [s for s in node["saved"] if s["name"] == entry]
    return saved


def test_a_tensor_changed_after_it_was_saved_carries_torchs_two_versions(trace_source):
    plain = _plain(CHANGED_AFTER)
    # torch's own check, plainly: "... is at version N; expected version M instead"
    now, then = map(int, re.search(r"is at version (\d+); expected version (\d+)",
                                   plain["error"]).groups())
    saved = _saved(trace_source(CHANGED_AFTER), "TanhBackward0", "result")
    assert saved["modified"] is True
    assert (saved["saved_version"], saved["version"]) == (then, now)
    assert plain["h"]._version == now  # the counter the tensor itself reports


def test_a_tensor_changed_before_it_was_saved_is_not_modified_and_has_its_version(
        trace_source):
    plain = _plain(CHANGED_BEFORE)
    assert "error" not in plain  # torch ran this backward: the changes did it no harm
    expected = plain["before_backward"]
    assert expected == 2
    doc = trace_source(CHANGED_BEFORE)
    saved = _saved(doc, "SinBackward0", "self")
    assert saved["version"] == expected
    assert "modified" not in saved and "saved_version" not in saved
    assert doc["error"] is None
    assert torch.allclose(torch.tensor(doc["params"]["x"]["grad"]["values"]),
                          plain["x"].grad)


@pytest.mark.parametrize("code", [CHANGED_AFTER, CHANGED_BEFORE])
def test_the_trace_with_versions_is_valid(trace_source, code):
    from app.format import validate

    validate(trace_source(code))
