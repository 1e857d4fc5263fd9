"""A torch.func-only script succeeds with its notes, and the forward graph of the function the
transform differentiates is drawn from one ordinary call, leaving the script's results, random
state and buffers as an untraced run leaves them (issue 24). app/trace/func_forward.py."""

from __future__ import annotations

import contextlib
import io

import torch

from tests.trace_facts import backward_events, diagnostics

TRAIN = """\
import torch
from torch import nn
from torch.func import functional_call, grad

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Dropout(0.3),
                      nn.Linear(4, 1))
params = {k: v.detach() for k, v in model.named_parameters()}
buffers = dict(model.named_buffers())  # BatchNorm's running statistics, updated in place
x, y = torch.randn(16, 3), torch.randn(16, 1)


def loss_fn(p, b, xb, yb):
    return ((functional_call(model, (p, b), (xb,)) - yb) ** 2).mean()


for step in range(4):
    g = grad(loss_fn)(params, buffers, x, y)
    params = {k: v - 0.1 * g[k] for k, v in params.items()}
    print(step, loss_fn(params, buffers, x, y).item(), torch.rand(1).item())
print([round(v, 6) for v in g["0.weight"].flatten().tolist()])
"""


def _plain(source: str) -> tuple[str, dict]:
    """The script run as its author runs it: its output and its module's globals."""
    out, namespace = io.StringIO(), {"__name__": "__main__"}
    with contextlib.redirect_stdout(out):
        exec(compile(source, "plain.py", "exec"), namespace)
    return out.getvalue(), namespace


def _traced_model(trace_source, source: str) -> tuple[dict, torch.nn.Module, torch.Tensor]:
    """The Trace, the script's model object after trace_source has returned (the script hands
    it out through a module of its own name), and the next numbers torch's generator gives in
    this process then: whatever the drawing after the script did to either shows there."""
    import sys

    box: dict = {}
    sys.modules["_func_forward_box"] = box  # type: ignore[assignment]
    try:
        doc = trace_source(source + "import _func_forward_box\n"
                           "_func_forward_box['model'] = model\n")
        after = torch.rand(5)  # the tracer ran in this process, on torch's own generator
    finally:
        del sys.modules["_func_forward_box"]
    return doc, box["model"], after


def _graph_names(out: torch.Tensor) -> list[str]:
    names, stack, seen = [], [out.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        names.append(type(fn).__name__)
        stack.extend(n for n, _ in fn.next_functions if n is not None)
    return sorted(names)


def test_training_with_torch_func_only_succeeds_and_draws_the_forward_graph(trace_source):
    doc, traced_model, traced_rand = _traced_model(trace_source, TRAIN)
    assert doc["error"] is None, doc["error"]
    assert backward_events(doc) == []  # torch.func's passes are torch's, not drawn as events
    # the script's numbers (losses, its random draws after each step, the last gradient) are
    # those of a plain run
    out, namespace = _plain(TRAIN)
    plain_rand = torch.rand(5)
    assert doc["stdout"] == out
    # the drawing ran the model once more after the script, with Dropout: the generator is
    # where a plain run leaves it, and BatchNorm's buffers are those a plain run leaves (the
    # drawing's call gets copies of the buffers given to functional_call; the next test runs
    # the model's own)
    assert torch.equal(traced_rand, plain_rand)
    plain_buffers = dict(namespace["model"].named_buffers())
    traced_buffers = dict(traced_model.named_buffers())
    assert traced_buffers.keys() == plain_buffers.keys()
    for name, value in plain_buffers.items():
        assert torch.equal(traced_buffers[name], value), name
    assert int(plain_buffers["1.num_batches_tracked"]) == 8  # a real change to keep equal
    # the view: the function grad differentiates, its parameters' leaves named as the model's
    [view] = doc["views"]
    assert view["kind"] == "func_forward" and view["line"] == 18
    assert "loss_fn" in view["label"] and "torch.func.grad" in view["label"]
    leaves = {n["param"]: n for n in view["graph"]["nodes"] if n["kind"] in ("param", "leaf")}
    model = namespace["model"]
    assert leaves.keys() == dict(model.named_parameters()).keys()
    for name, p in model.named_parameters():
        assert leaves[name]["shape"] == list(p.shape)
    names = [n["name"] for n in view["graph"]["nodes"]]
    assert "NativeBatchNormBackward0" in names and names.count("AddmmBackward0") == 2
    # the note says it is computed, not drawn, and that the forward graph is shown
    [note] = diagnostics(doc, "not_drawn")
    assert "`torch.func.grad` at line 18" in note["message"]
    assert "forward graph" in note["message"] and "shown as a view" in note["message"]


def test_the_drawing_puts_back_the_buffers_of_the_model_it_runs(trace_source):
    """The gradient is taken at evaluation, and the script leaves its model in training mode:
    the drawing's call, after the script, runs BatchNorm on the model's own running statistics
    in training mode (and Dropout on torch's generator). Afterwards both are as a plain run
    leaves them."""
    source = """\
import torch
from torch import nn
from torch.func import functional_call, grad
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.3), nn.Linear(4, 1))
model(torch.randn(8, 3))  # one training batch: running statistics of its own
model.eval()
params = {k: v.detach() for k, v in model.named_parameters()}
x = torch.randn(16, 3)
g = grad(lambda p: functional_call(model, p, (x,)).pow(2).mean())(params)
model.train()  # back to training, as the script leaves it
print(g["0.weight"].tolist())
"""
    doc, traced_model, traced_rand = _traced_model(trace_source, source)
    assert doc["error"] is None, doc["error"]
    out, namespace = _plain(source)
    plain_rand = torch.rand(5)
    assert doc["stdout"] == out
    assert [v["kind"] for v in doc["views"]] == ["func_forward"]  # the call did run
    assert torch.equal(traced_rand, plain_rand)
    plain_buffers = dict(namespace["model"].named_buffers())
    for name, value in traced_model.named_buffers():
        assert torch.equal(value, plain_buffers[name]), name
    assert int(plain_buffers["1.num_batches_tracked"]) == 1


def test_the_drawn_graph_is_the_graph_autograd_builds_for_the_same_call(trace_source):
    """The view's nodes are those of an ordinary call whose backward gives what grad gave."""
    source = """\
import torch
from torch.func import grad
torch.manual_seed(0)
w = torch.randn(3)
x = torch.randn(5, 3)
def f(w, x):
    return torch.sin(x @ w).pow(2).sum()
print(grad(f)(w, x).tolist())
"""
    doc = trace_source(source)
    assert doc["error"] is None, doc["error"]
    [view] = doc["views"]
    torch.manual_seed(0)
    w = torch.randn(3).requires_grad_()
    x = torch.randn(5, 3)
    out = torch.sin(x @ w).pow(2).sum()
    assert sorted(n["name"] for n in view["graph"]["nodes"] if n["kind"] != "output") == \
        _graph_names(out)
    (expected,) = torch.autograd.grad(out, w)
    assert torch.allclose(torch.tensor(eval(doc["stdout"])), expected)
    [leaf] = [n for n in view["graph"]["nodes"] if n["kind"] in ("param", "leaf")]
    assert leaf["param"] == "w"  # the argument grad differentiates, by its name in f


def test_vmap_of_grad_draws_one_sample(trace_source):
    doc = trace_source("""\
        import torch
        from torch.func import functional_call, grad, vmap
        model = torch.nn.Linear(3, 1)
        params = {k: v.detach() for k, v in model.named_parameters()}
        x, y = torch.randn(5, 3), torch.randn(5, 1)
        def loss(p, xi, yi):
            return ((functional_call(model, p, (xi,)) - yi) ** 2).sum()
        g = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
        print(tuple(g['weight'].shape))
        """)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"].strip() == "(5, 1, 3)"
    [view] = doc["views"]
    assert "first sample of vmap's batch" in view["label"]
    # one sample: the input row has no batch dimension, as in loss's own body
    [out] = [n for n in view["graph"]["nodes"] if n["kind"] == "output"]
    assert out["shape"] == []
    leaves = {n["param"]: n["shape"] for n in view["graph"]["nodes"]
              if n["kind"] in ("param", "leaf")}
    assert leaves == {"weight": [1, 3], "bias": [1]}


def test_nested_transforms_draw_the_outer_function_once(trace_source):
    """grad of a function that itself takes a grad: the inner call runs under the outer grad
    level (not an ordinary call, not remembered); the outer function is drawn, and its forward
    graph is the inner gradient's own graph, as autograd builds it for the same call."""
    doc = trace_source("""\
        import torch
        from torch.func import grad
        f = lambda x: (x ** 3).sum()
        print(grad(lambda x: grad(f)(x).sum())(torch.tensor([1.0, 2.0])).tolist())
        """)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"].strip() == "[6.0, 12.0]"  # d/dx of sum 3x^2 is 6x
    [view] = doc["views"]
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    out = torch.func.grad(lambda x: (x ** 3).sum())(x).sum()
    assert sorted(n["name"] for n in view["graph"]["nodes"] if n["kind"] != "output") == \
        _graph_names(out)
    assert torch.equal(torch.autograd.grad(out, x)[0], torch.tensor([6.0, 12.0]))
    [note] = diagnostics(doc, "not_drawn")
    assert "line 4" in note["message"] and "shown as a view" in note["message"]


def test_a_call_the_copy_cannot_read_is_not_drawn_and_the_note_stays(trace_source):
    """A function that only runs under vmap of vmap: no ordinary sample of one level to copy."""
    doc = trace_source("""\
        import torch
        from torch.func import grad, vmap
        f = lambda w, x: (w * x).sum()
        x = torch.randn(2, 3, 4)
        per_element = vmap(vmap(grad(f), in_dims=(None, 0)), in_dims=(None, 0))
        print(tuple(per_element(torch.ones(4), x).shape))
        """)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"].strip() == "(2, 3, 4)"
    assert doc.get("views", []) == []
    [note] = diagnostics(doc, "not_drawn")
    assert "line 5" in note["message"] and "shown as a view" not in note["message"]


def test_a_call_on_arguments_past_the_budget_is_not_remembered(trace_source):
    """The copies stay until the script ends: a call whose arguments hold more than the budget
    (a whole data set) is not copied, and its note stays without a picture; a small call at
    another line is still drawn."""
    from app.trace.func_forward import MAX_REMEMBERED_BYTES

    doc = trace_source(f"""\
        import torch
        from torch.func import grad
        f = lambda w, data: (w * data[:3]).sum()
        data = torch.ones({MAX_REMEMBERED_BYTES // 4 + 1})  # float32: just past the budget
        print(grad(f)(torch.ones(3), data).tolist())
        print(grad(f)(torch.ones(3), data[:3]).tolist())
        """)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == "[1.0, 1.0, 1.0]\n" * 2
    assert [v["line"] for v in doc["views"]] == [6]
    notes = {d["message"].split(":")[0]: d["message"] for d in diagnostics(doc, "not_drawn")}
    assert "shown as a view" not in notes["`torch.func.grad` at line 5"]
    assert "not drawn: its arguments take more than the 64 MB" in \
        notes["`torch.func.grad` at line 5"]  # why there is no picture is said
    assert "shown as a view" in notes["`torch.func.grad` at line 6"]


def test_functions_past_the_views_a_run_draws_are_said_to_be(trace_source):
    from app.trace.func_forward import MAX_DRAWN

    calls = "".join(f"print(grad(lambda w: (w * {k}).sum())(torch.ones(2)).tolist())\n"
                    for k in range(MAX_DRAWN + 1))
    doc = trace_source("import torch\nfrom torch.func import grad\n" + calls)
    assert doc["error"] is None, doc["error"]
    assert len(doc["views"]) == MAX_DRAWN
    last = next(d["message"] for d in diagnostics(doc, "not_drawn")
                if d["message"].startswith(f"`torch.func.grad` at line {MAX_DRAWN + 3}"))
    assert f"not drawn: a run draws the first {MAX_DRAWN} such functions" in last


REDRAWN_EXITS = """\
import sys
import torch
from torch.func import grad
finished = False
def f(x):
    if finished:  # only the drawing calls it now
        {ending}
    return (x ** 2).sum()
print(grad(f)(torch.ones(2)).tolist())
finished = True
print("done")
"""


def test_a_function_that_exits_when_drawn_leaves_the_report_whole(trace_source):
    source = REDRAWN_EXITS.format(ending="sys.exit(3)")
    out, _ = _plain(source)
    doc = trace_source(source)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == out == "[2.0, 2.0]\ndone\n"
    assert doc.get("views", []) == []  # no picture from a call that exited


def test_a_timeout_while_drawing_after_the_script_keeps_the_run_and_says_what_was_cut(
        trace_source):
    """The wall-clock limit (the worker's own SIGTERM handler, as in a real run) arrives while
    autograd-lab calls the script's function again after the script has ended: the script ran
    to its end, so the run is not a Timeout (issue 34); the drawing is left out and said so."""
    import signal

    from app.runner.worker import _on_term

    source = REDRAWN_EXITS.format(ending="os.kill(os.getpid(), signal.SIGTERM)").replace(
        "import sys\n", "import os, signal, sys\n")
    previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        doc = trace_source(source)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert doc["error"] is None, doc["error"]
    (cut,) = [d for d in doc["diagnostics"] if d["code"] == "after_work_cut"]
    assert "(drawing the functions its torch.func transforms differentiate)" in cut["message"]
    assert "the run's time limit came while it worked" in cut["message"]
    assert doc.get("views", []) == []
    assert doc["stdout"] == "[2.0, 2.0]\ndone\n"  # all of the script's own output


def test_a_huge_dict_key_names_a_leaf_clipped_and_the_report_stays_valid():
    """The keys of a dict given to a torch.func function name its leaves in the view: they are
    the script's strings, as long as it likes. Through the real sandboxed worker, whose report
    the runner checks against the schema (a name past its bound would refuse the whole run)."""
    from app.runner import trace_in_sandbox

    key = "p" * 5000
    doc = trace_in_sandbox(source=(
        "import torch\nfrom torch.func import grad\n"
        f"params = {{{key!r}: torch.ones(2)}}\n"
        f"print(grad(lambda p: (p[{key!r}] * 3).sum())(params).popitem()[1].tolist())\n"),
        name="keys.py", timeout=60)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == "[3.0, 3.0]\n"
    (view,) = doc["views"]
    names = [n["label"] for n in view["graph"]["nodes"] if n["kind"] in ("param", "leaf")]
    assert names and all(len(n) <= 1000 for n in names), [len(n) for n in names]


def test_functorch_is_handled_as_torch_func(trace_source):
    """The legacy namespace (`functorch.grad`, `functorch.vmap`) holds other objects than
    torch.func's: its transforms were neither noted nor drawn."""
    import functorch

    code = """
        import torch
        import functorch
        w = torch.ones(3)
        g = functorch.grad(lambda v: (v ** 2).sum())(w)
        print(g.tolist())
    """
    assert functorch.grad is not torch.func.grad
    doc = trace_source(code)
    assert doc["error"] is None and doc["stdout"].strip() == "[2.0, 2.0, 2.0]"  # as plain
    [note] = diagnostics(doc, "not_drawn")
    assert "`torch.func.grad` at line 5" in note["message"]  # the code's first line is blank
    [view] = doc["views"]
    assert view["kind"] == "func_forward" and "torch.func.grad" in view["label"]
