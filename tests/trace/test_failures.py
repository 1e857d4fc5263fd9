"""Autograd's common failures, explained: for each kind, a short script that hits it, the
explanation's code, the line it names (the line that made the problem, not the line of
`backward()` where they differ), and that the fix it suggests, applied to the script, makes the
script run without the error (issue 13)."""

from __future__ import annotations

import textwrap

import jsonschema
import pytest
import torch

from app.format import load_schema


def apply(source: str, fix: dict) -> str:
    lines = source.splitlines()
    for edit in sorted(fix["edits"], key=lambda e: -e["line"]):
        assert lines[edit["line"] - 1] == edit["before"]
        lines[edit["line"] - 1] = edit["after"]
    return "\n".join(lines) + "\n"


CASES = {
    "graph_freed": ("""
        import torch
        w = torch.randn(3, requires_grad=True)
        loss = (w.sigmoid() * 2).sum()
        loss.backward()
        loss.backward()
        """, 4, "retain_graph"),
    "saved_tensor_modified": ("""
        import torch
        w = torch.randn(3, requires_grad=True)
        h = w.sigmoid()
        h.mul_(2)
        h.sum().backward()
        """, 4, "inplace_version"),
    "graph_cut": ("""
        import torch
        w = torch.randn(3, requires_grad=True)
        y = (w * 2).detach()
        loss = y.sum()
        loss.backward()
        """, 3, "stop_gradient"),
    "graph_cut_data": ("""
        import torch
        w = torch.randn(3, requires_grad=True)
        y = w.data * 2
        y.sum().backward()
        """, 3, "stop_gradient"),
    "no_grad_forward": ("""
        import torch
        w = torch.randn(3, requires_grad=True)
        with torch.no_grad():
            loss = (w * 2).sum()
            loss.backward()
        """, 3, "stop_gradient"),
    "scalar_output": ("""
        import torch
        lin = torch.nn.Linear(3, 2)
        out = lin(torch.randn(4, 3))
        out.backward()
        """, 4, None),
    "leaf_inplace": ("""
        import torch
        w = torch.randn(3, requires_grad=True)
        loss = (w * w).sum()
        loss.backward()
        w.add_(-0.1 * w.grad)
        """, 5, "manual_update"),
    "view_of_leaf_inplace": ("""
        import torch
        w = torch.randn(3, requires_grad=True)
        v = w[:2]
        v.mul_(2)
        """, 4, "manual_update"),
    "wrong_gradient_count": ("""
        import torch

        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                return x * k

            @staticmethod
            def backward(ctx, g):
                return g * 2

        x = torch.randn(3, requires_grad=True)
        Scale.apply(x, 2.0).sum().backward()
        """, 10, "custom_function"),
    "nonleaf_grad": ("""
        import torch
        w = torch.randn(3, requires_grad=True)
        h = w * 2
        h.sum().backward()
        print(h.grad)
        """, 5, "tensor_hooks"),
}


def _explanation(doc: dict, code: str) -> dict:
    if doc["error"] and doc["error"].get("explanation"):
        return doc["error"]["explanation"]
    return next(d["explanation"] for d in doc["diagnostics"] if d["code"] == code)


@pytest.mark.parametrize("name", list(CASES))
def test_a_failure_is_explained_and_its_fix_works(trace_source, name):
    code, line, scenario = CASES[name]
    code = textwrap.dedent(code).lstrip("\n")
    expected = name.removesuffix("_data")
    doc = trace_source(code)
    jsonschema.validate(doc, load_schema())
    ex = _explanation(doc, expected)
    assert ex["code"] == expected
    assert ex["line"] == line, ex
    assert ex["scenario"] == scenario
    assert ex["what"] and ex["fix"]["say"] and ex["fix"]["edits"]
    # the same finding is in the list a page shows, under its stable code
    assert any(d["code"] == expected and d.get("explanation") == ex for d in doc["diagnostics"])
    fixed = trace_source(apply(code, ex["fix"]), name="fixed.py")
    assert fixed["error"] is None, (fixed["error"], apply(code, ex["fix"]))
    assert not any(d["code"] == expected for d in fixed["diagnostics"])


def test_the_culprit_is_not_the_backward_line_where_they_differ(trace_source):
    doc = trace_source(textwrap.dedent(CASES["saved_tensor_modified"][0]).lstrip("\n"))
    err = doc["error"]
    assert err["line"] == 5 and err["explanation"]["line"] == 4  # h.mul_(2), not backward()
    # the node that needed the saved value is named, and it is the one that saved it
    node = next(n for n in doc["events"][-1]["graph"]["nodes"]
                if n["id"] in err["explanation"]["nodes"])
    assert node["name"] == "SigmoidBackward0"
    assert any(s.get("modified") for s in node["saved"])


def test_the_first_backward_is_named_for_a_freed_graph(trace_source):
    doc = trace_source(textwrap.dedent(CASES["graph_freed"][0]).lstrip("\n"))
    ex = doc["error"]["explanation"]
    first, second = doc["events"]
    assert ex["line"] == first["line"] == 4 and doc["error"]["line"] == second["line"] == 5
    assert ex["event"] == second["index"]
    assert ex["nodes"] and all(any(s.get("freed") for s in n.get("saved", ()))
                               for n in second["graph"]["nodes"] if n["id"] in ex["nodes"])


def test_a_gradient_of_the_wrong_shape_is_explained(trace_source):
    doc = trace_source("""
        import torch

        class Half(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x / 2

            @staticmethod
            def backward(ctx, g):
                return (g / 2)[:2]

        Half.apply(torch.randn(3, requires_grad=True)).sum().backward()
    """)
    ex = doc["error"]["explanation"]
    assert ex["code"] == "invalid_gradient" and ex["line"] == 11  # (the text starts with \n)
    assert "shape [2]" in ex["what"] and "[3]" in ex["what"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a device mismatch needs a CUDA GPU")
def test_a_gradient_on_the_wrong_device_is_explained_and_fixed(trace_source):
    code = textwrap.dedent("""
        import torch

        class Move(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return (g * 2).cpu()

        x = torch.randn(3, device="cuda", requires_grad=True)
        Move.apply(x).sum().backward()
    """).lstrip("\n")
    ex = trace_source(code)["error"]["explanation"]
    assert ex["code"] == "invalid_gradient" and ex["line"] == 10  # backward's return
    assert trace_source(apply(code, ex["fix"]), name="fixed.py")["error"] is None


def test_a_failure_it_does_not_know_is_shown_as_it_was_and_marked(trace_source):
    doc = trace_source("""
        import torch
        raise ValueError("a script's own error")
    """)
    err = doc["error"]
    assert err["type"] == "ValueError" and err["message"] == "a script's own error"
    assert err["explanation"]["code"] == "unrecognised"
    assert not any(d.get("explanation") for d in doc["diagnostics"])


def test_nonleaf_grad_names_the_non_leaves_read_not_the_first_grad_on_the_line(trace_source):
    """`print(w.grad, x.grad, a.grad, b.grad, y.grad)`: w and x are leaves (their .grad is
    set), a, b and y are computed; the warning once named `w`."""
    code = textwrap.dedent("""
        import torch
        w = torch.randn(3, requires_grad=True)
        x = torch.randn(3, requires_grad=True)
        a = w * x
        b = a.exp()
        y = (a + b).sum()
        y.backward()
        print(w.grad, x.grad, a.grad, b.grad, y.grad)
        """).lstrip("\n")
    doc = trace_source(code)
    found = [d for d in doc["diagnostics"] if d["code"] == "nonleaf_grad"]
    assert len(found) == 1
    ex = found[0]["explanation"]
    assert ex["line"] == 8
    assert "`a.grad`, `b.grad` and `y.grad`" in ex["what"]
    assert "`w`" not in ex["what"] and "`x`" not in ex["what"]
    fixed = trace_source(apply(code, ex["fix"]), name="fixed.py")
    assert fixed["error"] is None
    assert not any(d["code"] == "nonleaf_grad" for d in fixed["diagnostics"])


GAN_ORDER = """
import torch
from torch import nn
torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
D = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
opt_G = torch.optim.Adam(G.parameters(), lr=1e-3)
opt_D = torch.optim.Adam(D.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
fake = G(torch.randn(16, 4))
D_loss = bce(D(torch.randn(16, 2)), torch.ones(16, 1)) + bce(D(fake.detach()), torch.zeros(16, 1))
G_loss = bce(D(fake), torch.ones(16, 1))
opt_D.zero_grad()
D_loss.backward()
opt_D.step()
opt_G.zero_grad()
G_loss.backward()
opt_G.step()
"""


def test_an_optimizer_step_before_the_backward_that_needs_its_weights_is_named(trace_source):
    """GAN code's usual failure (issue 24): the discriminator's step (line 15) changes the
    weights G_loss's backward (line 17) needs. It was "Something changed the output of
    AsStrided in place", with no line."""
    doc = trace_source(GAN_ORDER)
    err = doc["error"]
    assert err["type"] == "RuntimeError" and "inplace operation" in err["message"]
    explained = err["explanation"]
    assert explained["code"] == "step_before_backward" and explained["line"] == 15
    assert "Line 15 (`opt_D.step()`, an Adam step)" in explained["what"]
    assert "the backward at line 17 (`G_loss.backward()`)" in explained["what"]
    # Adam moved all of D's; the tensor autograd names is [8, 1], D.2.weight's transpose: of
    # the moved ones, only parameters of that size are named
    assert "`D.2.weight`" in explained["what"] and "`D.0.weight`" not in explained["what"]
    assert "move line 17" in explained["fix"]["say"]
    # the fix as said: the backward moved above the step; PyTorch runs it without an error
    lines = GAN_ORDER.split("\n")  # lines[n - 1] is line n
    lines[14], lines[16] = lines[16], lines[14]
    fixed = trace_source("\n".join(lines))
    assert fixed["error"] is None


def test_an_activation_changed_in_place_in_a_training_loop_is_not_blamed_on_the_step(
        trace_source):
    """The review's case: a leaf at version 0 and an activation whose versions go 0 -> 1 as the
    step's do; the step sits below the real culprit in the loop."""
    doc = trace_source("import torch\nw = torch.randn(3, requires_grad=True)\n"
                       "opt = torch.optim.SGD([w], lr=0.1)\nfor i in range(3):\n"
                       "    opt.zero_grad()\n    y = w.sigmoid()\n    z = y * 1\n"
                       "    if i == 1:\n        y.mul_(2)\n    z.sum().backward()\n"
                       "    opt.step()\n")
    explained = doc["error"]["explanation"]
    assert explained["code"] == "saved_tensor_modified" and explained["line"] == 9


def test_an_in_place_change_that_is_not_a_step_is_not_blamed_on_one(trace_source):
    doc = trace_source("import torch\nw = torch.ones(3, requires_grad=True)\n"
                       "opt = torch.optim.SGD([w], lr=0.1)\n"
                       "(w * 2).sum().backward()\nopt.step()\n"
                       "y = w.sigmoid()\nz = y * 1\ny.mul_(2)\nz.sum().backward()\n")
    explained = doc["error"]["explanation"]
    assert explained["code"] == "saved_tensor_modified" and explained["line"] == 8


VALUES_WITHOUT_GRAPH = {
    # a list of losses turned into one tensor: torch.tensor copies their numbers
    "torch.tensor": ("""
        import torch
        w = torch.ones(2, requires_grad=True)
        a, b = (w * 2).sum(), (w * 3).sum()
        loss = torch.tensor([a, b]).sum()
        loss.backward()
        """, 4, True),
    # a classifier's argmax fed to the loss (a printed .item() before it is no culprit)
    "argmax": ("""
        import torch
        torch.manual_seed(0)
        layer = torch.nn.Linear(4, 3)
        x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
        print(layer(x).sum().item())
        pred = layer(x).argmax(dim=1)
        loss = ((pred - y) ** 2).float().mean()
        loss.backward()
        """, 6, False),
    "item": ("""
        import torch
        w = torch.ones(2, requires_grad=True)
        value = (w * 2).sum().item()
        loss = torch.tensor(value) * 3
        loss.backward()
        """, 3, False),
    ">": ("""
        import torch
        w = torch.randn(4, requires_grad=True)
        on = (w * 2 > 0)
        loss = on.float().sum()
        loss.backward()
        """, 3, False),
    "long": ("""
        import torch
        w = torch.randn(4, requires_grad=True)
        counts = (w * 10).long()
        loss = counts.float().sum()
        loss.backward()
        """, 3, False),
}


@pytest.mark.parametrize("how", list(VALUES_WITHOUT_GRAPH))
def test_values_taken_out_of_a_graph_are_named_not_blamed_on_no_grad(trace_source, how):
    """"element 0 of tensors does not require grad" once read "nothing that produced it
    required grad (look for torch.no_grad(), detach() or .data)" for scripts whose tensors all
    had a graph: the line and the operation that took the values out are named instead."""
    code, line, fixable = VALUES_WITHOUT_GRAPH[how]
    code = textwrap.dedent(code).lstrip("\n")
    with pytest.raises(RuntimeError, match="does not require grad"):  # plain Python's error
        exec(compile(code, "<plain>", "exec"), {})  # noqa: S102 - the test's own script
    doc = trace_source(code)
    jsonschema.validate(doc, load_schema())
    ex = doc["error"]["explanation"]
    assert ex["code"] == "values_without_graph" and ex["line"] == line, ex
    assert f"`{how}`" in ex["what"] and "no_grad" not in ex["what"], ex["what"]
    assert ex["fix"]["say"]
    if fixable:  # torch.stack in its place: the fixed script runs, and w gets its gradient
        fixed = apply(code, ex["fix"])
        assert "torch.stack([a, b])" in fixed
        namespace: dict = {}
        exec(compile(fixed, "<fixed>", "exec"), namespace)  # noqa: S102
        assert namespace["w"].grad.tolist() == [5.0, 5.0]
        assert trace_source(fixed, name="fixed.py")["error"] is None


RNN = """\
import torch
torch.manual_seed(0)
cell = torch.nn.RNNCell(3, 4)
opt = torch.optim.SGD(cell.parameters(), lr=0.1)
h = torch.zeros(1, 4)
for step in range(3):
    x = torch.randn(1, 3)
    h = cell(x, h)
    loss = h.pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_state_carried_across_iterations_is_detached_not_retained(trace_source):
    """The fix once offered for an RNN's carried hidden state was retain_graph=True, which then
    fails too (the step changed the weights the old graph saved). The fix people give, and the
    one offered now, detaches the carried state each iteration; both checked in plain Python."""
    def plain(code: str) -> None:
        exec(compile(code, "<plain>", "exec"), {})  # noqa: S102 - the test's own script

    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        plain(RNN)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        plain(RNN.replace("loss.backward()", "loss.backward(retain_graph=True)"))
    doc = trace_source(RNN)
    ex = doc["error"]["explanation"]
    assert ex["code"] == "carried_graph" and ex["line"] == 8, ex
    assert "`h`" in ex["what"] and "optimizer step" in ex["what"]
    fixed = apply(RNN, ex["fix"])
    assert "h = h.detach()" in fixed
    plain(fixed)  # runs to the end
    again = trace_source(fixed, name="fixed.py")
    assert again["error"] is None
    assert sum(e["kind"] == "backward" for e in again["events"]) == 3


def test_a_second_backward_outside_a_loop_still_keeps_its_graph(trace_source):
    """Not every freed graph is a carried state: two backward calls of one loss keep the
    retain_graph fix (CASES' graph_freed runs it)."""
    doc = trace_source(textwrap.dedent(CASES["graph_freed"][0]).lstrip("\n"))
    assert doc["error"]["explanation"]["code"] == "graph_freed"


def test_a_comparison_after_a_no_grad_forward_is_not_blamed(trace_source):
    """From a review: values taken out (a comparison) after the real cut (no_grad) were named
    instead of it; the classic cut comes first."""
    code = textwrap.dedent("""
        import torch
        w = torch.randn(3, requires_grad=True)
        with torch.no_grad():
            y = w * 2
        mask = w > 0
        y.sum().backward()
    """).lstrip("\n")
    ex = trace_source(code)["error"]["explanation"]
    assert ex["code"] == "no_grad_forward" and ex["line"] == 3, ex
