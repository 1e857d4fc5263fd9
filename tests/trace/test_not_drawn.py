"""What the tracer sees but does not draw is said, with its line: torch.func transforms,
forward-mode AD and torch.autograd.functional compute gradients without a backward graph of
the script's for the Trace (issue 12). The script's own results are untouched."""

from __future__ import annotations

import torch

from tests.trace_facts import backward_events, contribution_sum, diagnostics, values

SCRIPT = """\
import torch
from torch.func import grad, vmap
import torch.autograd.forward_ad as fwAD

torch.manual_seed(0)
w = torch.randn(3)
x, y = torch.randn(8, 3), torch.randn(8)
per_sample = vmap(grad(lambda w, xi, yi: (xi @ w - yi) ** 2), in_dims=(None, 0, 0))(w, x, y)
print(per_sample.tolist())
with fwAD.dual_level():
    out = fwAD.make_dual(w, torch.ones(3)).sin()
    print(fwAD.unpack_dual(out).tangent.tolist())
jac = torch.autograd.functional.jacobian(lambda v: v.exp(), w)
p = torch.nn.Parameter(w.clone())
loss = (x @ p - y).pow(2).sum()
loss.backward()
"""


def test_func_transforms_and_forward_ad_are_noted_with_their_lines(trace_source):
    doc = trace_source(SCRIPT)
    assert doc["error"] is None, doc["error"]
    notes = {d["message"] for d in diagnostics(doc, "not_drawn")}
    assert any(m.startswith("per-sample gradients via `torch.func.vmap(grad(...))` at line 8")
               for m in notes), notes
    assert any(m.startswith("forward-mode AD (`torch.autograd.forward_ad`) at line 11")
               for m in notes), notes
    assert any("`torch.autograd.functional.jacobian` at line 13" in m for m in notes), notes
    # the one backward the script made is recorded as ever, and only that one: the transforms'
    # and jacobian's own passes are torch's
    (ev,) = backward_events(doc)
    assert torch.allclose(contribution_sum(ev, "p"), values(doc["params"]["p"]["grad"]),
                          atol=1e-5)
    # the script's numbers are torch's: per-sample gradients equal a loop of ordinary backward
    torch.manual_seed(0)
    w = torch.randn(3)
    x, y = torch.randn(8, 3), torch.randn(8)
    expected = [(2 * (x[i] @ w - y[i]) * x[i]).tolist() for i in range(8)]
    got = eval(doc["stdout"].splitlines()[0])
    assert torch.allclose(torch.tensor(got), torch.tensor(expected), atol=1e-5)
    assert torch.allclose(torch.tensor(eval(doc["stdout"].splitlines()[1])), w.cos(), atol=1e-6)


def test_a_plain_script_has_no_such_note(trace_source):
    doc = trace_source("import torch\nw = torch.ones(2, requires_grad=True)\n"
                       "(w * w).sum().backward()\n")
    assert diagnostics(doc, "not_drawn") == []


def test_an_import_the_worker_lacks_names_the_module_and_what_it_offers(trace_source):
    doc = trace_source("import torch\nimport wandb_that_is_not_installed as wandb\n")
    err = doc["error"]
    assert err["type"] == "ModuleNotFoundError" and err["line"] == 2
    ex = err["explanation"]
    assert ex["code"] == "missing_module" and ex["line"] == 2
    assert "`wandb_that_is_not_installed`" in ex["what"]
    for offered in ("torch", "numpy", "matplotlib", "tqdm", "torchviz"):
        assert offered in ex["what"]
    # and each module it names can really be imported here
    import importlib

    from app.trace.failures import OFFERED

    for name in OFFERED:
        importlib.import_module(name)


GRADCHECK_ONLY = """\
import torch


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x ** 2


x = torch.randn(4, dtype=torch.double, requires_grad=True)
print(torch.autograd.gradcheck(Cube.apply, (x,)))
from torch.autograd import gradgradcheck
print(gradgradcheck(Cube.apply, (x,)))
"""


def test_a_script_whose_only_autograd_work_is_gradcheck_succeeds_and_says_so(trace_source):
    """The "Extending PyTorch" pattern: define a Function, gradcheck it, print True. It was
    reported as an error ("no autograd graph to show") though torch ran hundreds of backward
    passes inside the checks. Each check is now drawn as one representative pass
    (tests/trace/test_gradcheck_events.py), so it is no longer a note."""
    doc = trace_source(GRADCHECK_ONLY)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"].split() == ["True", "True"]  # the script's results are torch's
    assert diagnostics(doc, "not_drawn") == []
    # one event per check, none for torch's passes inside them, no root chosen by us
    assert [(e["line"], e["gradcheck"]["check"]) for e in backward_events(doc)] == \
        [(17, "gradcheck"), (19, "gradgradcheck")]
    assert diagnostics(doc, "root_chosen") == []


def test_a_torch_func_only_script_succeeds_with_its_notes(trace_source):
    """Gradients from torch.func alone (vmap(grad(...)) over a functional_call): no backward of
    the script's, and no tensor with a grad_fn left to pick as a root."""
    doc = trace_source(
        "import torch\n"
        "from torch.func import functional_call, grad, vmap\n"
        "model = torch.nn.Linear(3, 1)\n"
        "params = {k: v.detach() for k, v in model.named_parameters()}\n"
        "x, y = torch.randn(5, 3), torch.randn(5, 1)\n"
        "def loss(p, xi, yi):\n"
        "    return ((functional_call(model, p, (xi,)) - yi) ** 2).sum()\n"
        "g = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)\n"
        "print(tuple(g['weight'].shape))\n")
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"].strip() == "(5, 1, 3)"
    assert any("line 8" in d["message"] for d in diagnostics(doc, "not_drawn"))


def test_a_script_with_no_gradient_work_at_all_is_still_no_graph(trace_source):
    doc = trace_source("import torch\nprint(torch.ones(2) * 2)\n")
    assert doc["error"]["type"] == "NoGraph"


def test_a_forward_only_torch_func_script_gets_no_backward_of_ours(trace_source):
    """PyTorch's ensembling tutorial: models' stacked parameters (they require grad) run
    forward under vmap(functional_call), and nothing calls backward. Before, autograd-lab ran
    a backward from a root it chose, which the script never asked for."""
    doc = trace_source(
        "import copy, torch\n"
        "from torch.func import functional_call, stack_module_state, vmap\n"
        "torch.manual_seed(0)\n"
        "models = [torch.nn.Linear(3, 2) for _ in range(4)]\n"
        "params, buffers = stack_module_state(models)\n"
        "base = copy.deepcopy(models[0]).to('meta')\n"
        "def run(p, b, x):\n"
        "    return functional_call(base, (p, b), (x,))\n"
        "x = torch.randn(5, 3)\n"
        "out = vmap(run, in_dims=(0, 0, None))(params, buffers, x)\n"
        "print(tuple(out.shape), out.requires_grad)\n")
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"].strip() == "(4, 5, 2) True"  # a graph was there to pick a root from
    assert backward_events(doc) == []
    assert diagnostics(doc, "root_chosen") == []
    assert any("line 10" in d["message"] for d in diagnostics(doc, "not_drawn"))


def test_a_torch_func_script_that_names_its_output_still_gets_that_backward(trace_source):
    """OUTPUT is the script asking for a backward from that tensor, torch.func or not."""
    doc = trace_source(
        "import torch\n"
        "from torch.func import vmap\n"
        "w = torch.ones(3, requires_grad=True)\n"
        "rows = vmap(lambda r: r * 2)(torch.randn(4, 3))\n"
        "OUTPUT = (rows @ w).sum()\n")
    assert doc["error"] is None, doc["error"]
    (event,) = backward_events(doc)
    assert event["synthetic"] and diagnostics(doc, "root_chosen")
    assert "w" in event["contributions"]
