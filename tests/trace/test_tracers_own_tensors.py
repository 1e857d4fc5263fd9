"""The tracer's own tensors are never shown as the script's (issue 34): the copies a torch.func
function is drawn on (a vmap batch's first sample among them), the wrappers a transform puts
around the script's tensors while it runs, gradcheck's float64 inputs, and anything the
script's code makes when autograd-lab calls it again after the script has ended. Every name in
`params`, in the findings and on the recorded passes' graphs must be a tensor the script holds
when run plainly in PyTorch, with `requires_grad` and `.grad` as PyTorch leaves them."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
from torch import nn

from tests.trace_facts import backward_events, diagnostics

# per-sample gradients (PyTorch's tutorial recipe), beside an ordinary training step, so that
# the "requires grad but received no gradient" finding looks at every named tensor
PER_SAMPLE = """\
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

torch.manual_seed(0)
model = nn.Linear(3, 1)
data, targets = torch.randn(8, 3), torch.randn(8, 1)
params = {k: v.detach() for k, v in model.named_parameters()}


def sample_loss(p, x, y):
    out = functional_call(model, p, (x.unsqueeze(0),))
    return ((out - y) ** 2).mean()


per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, data, targets)
print(per_sample["weight"].shape)

opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss = ((model(data) - targets) ** 2).mean()
loss.backward()
opt.step()
"""

# jacrev and hessian of functions that call a module without parameters (its call makes the
# recorder look for names, inside the transform and again when the function is drawn)
JACOBIANS = """\
import torch
from torch import nn
from torch.func import hessian, jacrev

torch.manual_seed(0)
act = nn.Tanh()
w = torch.randn(3, 3)


def f(x):
    return act(w @ x)


x = torch.randn(3)
J = jacrev(f)(x)
z = torch.randn(3, requires_grad=True)
(z * 2).sum().backward()
H = hessian(lambda v: act(v).pow(3).sum())(x)
print(J.shape, H.shape)
"""

# a custom Function gradchecked by the tracer after the script, whose forward calls a module
CUSTOM = """\
import torch
from torch import nn

act = nn.Tanh()


class Squash(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp):
        out = act(inp)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        out, = ctx.saved_tensors
        return g * (1 - out ** 2)


torch.manual_seed(0)
a = torch.randn(4, requires_grad=True)
Squash.apply(a).sum().backward()
print(a.grad)
"""

# a function that makes a leaf of its own each call: the drawing's call makes one more
MAKES_A_LEAF = """\
import torch
from torch.func import grad


def f(x):
    scale = torch.ones(3, requires_grad=True)
    return (scale * x).sum()


x = torch.randn(3)
g = grad(f)(x)
y = torch.randn(3, requires_grad=True)
(y ** 2).sum().backward()
print(g)
"""

# the script's own gradcheck of a function that calls a module: its representative pass runs
# the function on copies of the inputs (gradcheck_events.py), which stand in for them
SCRIPTS_GRADCHECK = """\
import torch
from torch import nn

act = nn.Tanh()


def f(inp):
    return act(inp * 2)


torch.manual_seed(0)
x = torch.randn(3, dtype=torch.float64, requires_grad=True)
print(torch.autograd.gradcheck(f, (x,)))
w = torch.randn(3, requires_grad=True)
(w * 3).sum().backward()
"""

SCRIPTS = {"per_sample": PER_SAMPLE, "jacobians": JACOBIANS, "custom": CUSTOM,
           "makes_a_leaf": MAKES_A_LEAF, "scripts_gradcheck": SCRIPTS_GRADCHECK}
# the namer names a tensor by the innermost frame of the script's that holds it: the script's
# `a` is Squash.forward's `inp` (the very same tensor) when the forward calls a module, and `x`
# is f's `inp` when gradcheck calls f with it
ALIASES = {"custom": {"inp": "a"}, "scripts_gradcheck": {"inp": "x"}}


def _plain(source: str) -> dict:
    """The script's own namespace, run as its author runs it."""
    namespace: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, "plain.py", "exec"), namespace)
    return namespace


def _scripts_tensors(namespace: dict) -> dict[str, torch.Tensor]:
    """Every name the page may give a tensor the script holds: its variables, and its
    models' parameters (by `named_parameters()`, with the model's name before them where the
    script holds several)."""
    found = {n: v for n, v in namespace.items() if isinstance(v, torch.Tensor)}
    models = [(n, m) for n, m in namespace.items() if isinstance(m, nn.Module)]
    for name, model in models:
        for pname, p in model.named_parameters():
            found[pname] = found[f"{name}.{pname}"] = p
    return found


@pytest.mark.parametrize("which", sorted(SCRIPTS))
def test_every_name_on_the_page_is_a_tensor_the_script_made(trace_source, which):
    source = SCRIPTS[which]
    doc = trace_source(source)
    assert doc["error"] is None, doc["error"]
    own = _scripts_tensors(_plain(source))
    own.update({alias: own[name] for alias, name in ALIASES.get(which, {}).items()})
    for name, p in doc["params"].items():
        assert name in own, f"{name} is not the script's ({sorted(own)})"
        assert p["requires_grad"] == own[name].requires_grad, name
        assert (p["grad"] is None) == (own[name].grad is None), name
    for d in doc["diagnostics"]:
        assert set(d.get("params") or ()) <= set(own), d
    for e in backward_events(doc):
        assert set(e["uses"]) <= set(own), e["uses"]
        for n in e["graph"]["nodes"]:
            if n.get("param") is not None:
                assert n["param"] in own, n
    # nothing the drawing made is said to have been left without a gradient
    assert not diagnostics(doc, "no_gradient"), diagnostics(doc, "no_gradient")


def test_the_views_name_the_drawn_copies_by_the_scripts_own_names(trace_source):
    """The drawn forward of vmap(grad(f)) names its leaves by the keys of the script's dict
    (which are its model's parameter names), never by a number or a `#2`."""
    doc = trace_source(PER_SAMPLE)
    (view,) = [v for v in doc["views"] if v["kind"] == "func_forward"]
    leaves = sorted(n["param"] for n in view["graph"]["nodes"] if n.get("param"))
    assert leaves == ["bias", "weight"]


FIGURE = """\
import matplotlib.pyplot as plt
import torch
from torch.func import grad


def f(x):
    plt.figure()
    plt.plot([1, 2])
    plt.savefig("f.png")
    plt.close()
    return (x ** 2).sum()


print(grad(f)(torch.ones(2)).tolist())
"""


def test_a_figure_the_drawing_makes_is_not_the_scripts(trace_source, tmp_path, monkeypatch):
    """The script saves one figure (inside the transform); the drawing's extra call of `f`
    saves another, which is not kept as the script's."""
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    doc = trace_source(FIGURE)
    assert doc["error"] is None, doc["error"]
    assert [f["via"] for f in doc.get("figures", [])] == ["savefig"]
