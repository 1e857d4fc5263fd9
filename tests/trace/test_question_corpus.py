"""Thirty questions as people ask them about autograd, each a short script of ours written from
the patterns posted on forums (freezing, `.data`, in-place, hooks, optimizers, accumulation,
checkpoint, NaN, `torch.tensor` of tensors, `argmax`, an RNN's state, a GAN's step, ...).

Every script runs twice: plainly, here, and traced. Two things are checked for each:
- the answer's key fact, asserted against what plain PyTorch did (`.grad` as it leaves it, the
  error plain Python raises, the change an optimizer made), and found in the Trace where a page
  shows it (a finding's code, an explanation, a step's check);
- no claim of the Trace contradicts PyTorch: each parameter's final `.grad` is PyTorch's, each
  completed pass's uses add up to what it added to `.grad` (where no hook changed it and nothing
  was dropped), and each checked optimizer step matches its rule.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

TOL = 1e-4


@dataclass(frozen=True)
class Question:
    asked: str
    script: str
    fact: Callable[[dict, dict, BaseException | None], None]  # (Trace, plain namespace, error)


def codes(doc: dict) -> set[str]:
    return {d["code"] for d in doc["diagnostics"]}


def explanation(doc: dict) -> dict:
    return (doc["error"] or {}).get("explanation") or {}


def backwards(doc: dict) -> list[dict]:
    return [e for e in doc["events"] if e["kind"] == "backward"]


def steps(doc: dict) -> list[dict]:
    return [e for e in doc["events"] if e["kind"] == "step"]


def fails(kind: str, match: str):
    def fact_of(f):
        def fact(doc, ns, error):
            assert error is not None and type(error).__name__ == kind and match in str(error), \
                error  # what plain Python raises
            assert doc["error"]["type"] == kind
            f(doc, ns, error)
        return fact
    return fact_of


def ok(f):
    def fact(doc, ns, error):
        assert error is None, error
        assert doc["error"] is None, doc["error"]
        f(doc, ns, error)
    return fact


QUESTIONS = {
    "reused layer: are its weights updated twice?": Question(
        "I call the same nn.Linear twice in forward. Does its weight get two updates?", """
        import torch
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 3)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        x = torch.randn(2, 3)
        loss = lin(torch.tanh(lin(x))).sum()
        loss.backward()
        before = lin.weight.detach().clone()
        opt.step()
        """, ok(lambda doc, ns, e: (
            assert_true(backwards(doc)[0]["uses"]["weight"] == 2),
            assert_true("multiple_uses" in codes(doc)),
            # one step, by lr × the summed gradient: what SGD did
            assert_true(torch.allclose(ns["lin"].weight,
                                       ns["before"] - 0.1 * ns["lin"].weight.grad)),
            assert_true(len(steps(doc)) == 1)))),
    "weight dropout: why does the raw weight never change?": Question(
        "I use w.data in forward and my raw weight never gets a gradient.", """
        import torch
        w = torch.nn.Parameter(torch.ones(3))
        b = torch.nn.Parameter(torch.zeros(3))
        x = torch.ones(3)
        loss = (w.data * x + b).sum() * 2
        loss.backward()
        """, ok(lambda doc, ns, e: assert_true(
            ns["w"].grad is None and ns["b"].grad.tolist() == [2.0] * 3
            and "no_gradient" in codes(doc)
            and any("`.data`" in d["message"] for d in doc["diagnostics"])))),
    "why is my .grad None on a non-leaf?": Question(
        "h = w * 2; h.grad is None after backward. Why?", """
        import torch
        w = torch.ones(3, requires_grad=True)
        h = w * 2
        h.sum().backward()
        print(h.grad)
        """, ok(lambda doc, ns, e: assert_true(ns["w"].grad.tolist() == [2.0] * 3
                                                and "nonleaf_grad" in codes(doc)))),
    "retain_grad keeps a non-leaf's gradient": Question(
        "How do I see the gradient of an intermediate tensor?", """
        import torch
        w = torch.ones(3, requires_grad=True)
        h = w * 2
        h.retain_grad()
        (h * h).sum().backward()
        """, ok(lambda doc, ns, e: assert_true(ns["h"].grad.tolist() == [4.0] * 3
                                                and "nonleaf_grad" not in codes(doc)))),
    "gradients accumulate without zero_grad": Question(
        "My gradients double every iteration.", """
        import torch
        w = torch.ones(2, requires_grad=True)
        for _ in range(2):
            (w * 3).sum().backward()
        """, ok(lambda doc, ns, e: (
            assert_true(ns["w"].grad.tolist() == [6.0, 6.0]),
            assert_true(backwards(doc)[1]["grads"]["w"]["before"]["values"] == [3.0, 3.0]),
            # said in words: the second pass added onto the first's .grad
            assert_true("grad_accumulated" in codes(doc))))),
    "zero_grad between passes": Question(
        "Does zero_grad reset .grad?", """
        import torch
        w = torch.nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([w], lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            (w * 3).sum().backward()
        """, ok(lambda doc, ns, e: (
            assert_true(ns["w"].grad.tolist() == [3.0, 3.0]),
            assert_true(backwards(doc)[1]["grads"]["w"]["before"] is None)))),
    "in-place on a saved activation": Question(
        "one of the variables needed for gradient computation has been modified by an inplace "
        "operation", """
        import torch
        torch.manual_seed(0)
        w = torch.randn(3, requires_grad=True)
        h = w.sigmoid()
        h.mul_(2)
        h.sum().backward()
        """, fails("RuntimeError", "inplace operation")(lambda doc, ns, e: assert_true(
            explanation(doc)["code"] == "saved_tensor_modified"
            and explanation(doc)["line"] == 5))),
    "updating weights by hand under autograd": Question(
        "a leaf Variable that requires grad is being used in an in-place operation", """
        import torch
        torch.manual_seed(0)
        w = torch.randn(3, requires_grad=True)
        (w * w).sum().backward()
        w -= 0.1 * w.grad
        """, fails("RuntimeError", "leaf Variable")(lambda doc, ns, e: assert_true(
            explanation(doc)["code"] == "leaf_inplace"))),
    "backward twice": Question(
        "Trying to backward through the graph a second time", """
        import torch
        torch.manual_seed(0)
        w = torch.randn(3, requires_grad=True)
        loss = (w.sigmoid() * 2).sum()
        loss.backward()
        loss.backward()
        """, fails("RuntimeError", "second time")(lambda doc, ns, e: assert_true(
            explanation(doc)["code"] == "graph_freed" and explanation(doc)["line"] == 5))),
    "an RNN's hidden state across batches": Question(
        "My RNN fails with 'backward through the graph a second time' in the second batch.", """
        import torch
        torch.manual_seed(0)
        cell = torch.nn.GRUCell(3, 4)
        opt = torch.optim.Adam(cell.parameters(), lr=0.01)
        h = torch.zeros(1, 4)
        for _ in range(3):
            h = cell(torch.randn(1, 3), h)
            loss = h.pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        """, fails("RuntimeError", "second time")(lambda doc, ns, e: assert_true(
            explanation(doc)["code"] == "carried_graph" and explanation(doc)["line"] == 7))),
    "torch.tensor of losses": Question(
        "element 0 of tensors does not require grad and does not have a grad_fn", """
        import torch
        w = torch.ones(2, requires_grad=True)
        losses = [(w * 2).sum(), (w * 3).sum()]
        total = torch.tensor(losses).sum()
        total.backward()
        """, fails("RuntimeError", "does not require grad")(lambda doc, ns, e: assert_true(
            explanation(doc)["code"] == "values_without_graph"
            and "torch.tensor" in explanation(doc)["what"]))),
    "argmax before the loss": Question(
        "My classifier's loss has no grad_fn.", """
        import torch
        torch.manual_seed(0)
        net = torch.nn.Linear(4, 3)
        x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
        pred = net(x).argmax(dim=1)
        loss = (pred != y).float().mean()
        loss.backward()
        """, fails("RuntimeError", "does not require grad")(lambda doc, ns, e: assert_true(
            explanation(doc)["code"] == "values_without_graph" and explanation(doc)["line"] == 5))),
    "loss built from .item()": Question(
        "I take .item() of my loss and make a tensor again; backward fails.", """
        import torch
        w = torch.ones(2, requires_grad=True)
        value = (w ** 2).sum().item()
        loss = torch.tensor(value, requires_grad=True)
        loss.backward()
        print(w.grad)
        """, ok(lambda doc, ns, e: assert_true(
            ns["w"].grad is None and "no_gradient" in codes(doc)))),
    "forward under no_grad": Question(
        "I compute my loss inside torch.no_grad() and backward fails.", """
        import torch
        torch.manual_seed(0)
        w = torch.randn(3, requires_grad=True)
        with torch.no_grad():
            loss = (w * 2).sum()
        loss.backward()
        """, fails("RuntimeError", "does not require grad")(lambda doc, ns, e: assert_true(
            explanation(doc)["code"] == "no_grad_forward"))),
    "detach cuts the graph": Question(
        "After detach() my weights get no gradient.", """
        import torch
        torch.manual_seed(0)
        w = torch.randn(3, requires_grad=True)
        b = torch.randn(3, requires_grad=True)
        y = (w * 2).detach() + b
        y.sum().backward()
        """, ok(lambda doc, ns, e: assert_true(
            ns["w"].grad is None and ns["b"].grad.tolist() == [1.0] * 3
                                                and "no_gradient" in codes(doc)))),
    "a frozen layer": Question(
        "I set requires_grad=False on my first layer; is it still updated?", """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
        for p in model[0].parameters():
            p.requires_grad_(False)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        before = model[0].weight.detach().clone()
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
        """, ok(lambda doc, ns, e: assert_true(
            ns["model"][0].weight.grad is None and torch.equal(ns["model"][0].weight, ns["before"])
            and steps(doc)[0]["params"]["0.weight"]["check"]["unchecked"] == "no_grad"))),
    "GAN: freezing D before G's backward": Question(
        "In my GAN the discriminator's gradients disappear.", """
        import torch
        torch.manual_seed(0)
        G, D = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
        score = D(G(torch.randn(4, 2))).mean()
        D.requires_grad_(False)
        (-score).backward()
        """, ok(lambda doc, ns, e: assert_true(
            ns["D"].weight.grad is None and "D.weight" in backwards(doc)[0]["dropped"]
            and "dropped_gradient" in codes(doc)))),
    "SGD weight decay with zero gradients": Question(
        "My gradients are zero but the weights still change.", """
        import torch
        w = torch.nn.Parameter(torch.ones(3))
        w.register_hook(lambda g: g * 0)
        opt = torch.optim.SGD([w], lr=0.1, weight_decay=0.5)
        (w * 2).sum().backward()
        opt.step()
        """, ok(lambda doc, ns, e: assert_true(
            ns["w"].detach().tolist() == pytest.approx([0.95] * 3)
            and steps(doc)[0]["params"]["w"]["check"]["matches"]
            and steps(doc)[0]["settings"][0]["weight_decay"] == 0.5))),
    "Adam ignores the gradient's scale": Question(
        "I multiplied my loss by 1000 and Adam's update did not change.", """
        import torch
        w = torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.Adam([w], lr=0.01)
        (w * torch.tensor([1.0, 100.0, 10000.0])).sum().backward()
        opt.step()
        """, ok(lambda doc, ns, e: assert_true(
            (1 - ns["w"].detach()).tolist() == pytest.approx([0.01] * 3, rel=1e-4)
            and steps(doc)[0]["params"]["w"]["check"]["matches"]))),
    "SGD momentum": Question(
        "Why does my weight keep moving after the gradient is zero?", """
        import torch
        w = torch.nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
        (w * 2).sum().backward()
        opt.step()
        opt.zero_grad()
        (w * 0).sum().backward()
        opt.step()
        """, ok(lambda doc, ns, e: assert_true(
            all(s["params"]["w"]["check"]["matches"] for s in steps(doc))
            and ns["w"].detach().tolist() == pytest.approx([1 - 0.2 - 0.18] * 2)))),
    "gradient clipping": Question(
        "Does clip_grad_norm_ change .grad before the step?", """
        import torch
        w = torch.nn.Parameter(torch.ones(4))
        opt = torch.optim.SGD([w], lr=1.0)
        (w * 10).sum().backward()
        torch.nn.utils.clip_grad_norm_([w], 1.0)
        opt.step()
        """, ok(lambda doc, ns, e: assert_true(
            float(torch.linalg.vector_norm(ns["w"].grad)) == pytest.approx(1.0, rel=1e-5)
            and steps(doc)[0]["params"]["w"]["check"]["matches"]))),
    "a tensor hook scaling the gradient": Question(
        "My register_hook doubles the gradient; does .grad show it?", """
        import torch
        w = torch.ones(2, requires_grad=True)
        w.register_hook(lambda g: g * 2)
        (w * 3).sum().backward()
        """, ok(lambda doc, ns, e: assert_true(ns["w"].grad.tolist() == [6.0, 6.0]
                                                and "hook_changed" in codes(doc)))),
    "max routes the gradient": Question(
        "Which entry gets the gradient of max?", """
        import torch
        w = torch.tensor([1.0, 5.0, 3.0], requires_grad=True)
        w.max().backward()
        """, ok(lambda doc, ns, e: assert_true(ns["w"].grad.tolist() == [0.0, 1.0, 0.0]))),
    "relu at zero": Question(
        "What is ReLU's gradient at exactly 0?", """
        import torch
        w = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
        torch.relu(w).sum().backward()
        """, ok(lambda doc, ns, e: assert_true(ns["w"].grad.tolist() == [0.0, 0.0, 1.0]))),
    "torch.where with a NaN branch": Question(
        "My loss is finite but the gradient is NaN (torch.where with sqrt).", """
        import torch
        w = torch.tensor([0.0, 4.0], requires_grad=True)
        y = torch.where(w > 0, torch.sqrt(w), torch.zeros_like(w))
        y.sum().backward()
        """, ok(lambda doc, ns, e: assert_true(
            math.isnan(ns["w"].grad[0]) and "nonfinite_gradient" in codes(doc)))),
    "a leaf moved with .to() is not a leaf": Question(
        "x = torch.randn(3, requires_grad=True).to(device); x.grad is None.", """
        import torch
        torch.manual_seed(0)
        x = torch.randn(3, requires_grad=True).to(torch.float64)
        (x * 2).sum().backward()
        print(x.grad)
        """, ok(lambda doc, ns, e: assert_true(ns["x"].grad is None and ns["x"].grad_fn is not None
                                                and "nonleaf_grad" in codes(doc)))),
    "a scalar output is needed": Question(
        "grad can be implicitly created only for scalar outputs", """
        import torch
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 2)
        out = lin(torch.randn(4, 3))
        out.backward()
        """, fails("RuntimeError", "scalar outputs")(lambda doc, ns, e: assert_true(
            explanation(doc)["code"] == "scalar_output"))),
    "autograd.grad leaves .grad alone": Question(
        "torch.autograd.grad returns gradients but .grad stays None?", """
        import torch
        w = torch.ones(2, requires_grad=True)
        (g,) = torch.autograd.grad((w * 3).sum(), [w])
        """, ok(lambda doc, ns, e: assert_true(
            ns["w"].grad is None and ns["g"].tolist() == [3.0, 3.0]
            and backwards(doc)[0]["grads"]["w"]["after"] is None))),
    "a second derivative with create_graph": Question(
        "How do I get the gradient of a gradient?", """
        import torch
        x = torch.tensor(2.0, requires_grad=True)
        (dy,) = torch.autograd.grad(x ** 3, x, create_graph=True)
        dy.backward()
        """, ok(lambda doc, ns, e: assert_true(ns["x"].grad.item() == pytest.approx(12.0)))),
    "checkpoint recomputes, gradients are the same": Question(
        "Does torch.utils.checkpoint change my gradients?", """
        import torch
        from torch.utils.checkpoint import checkpoint
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 3)
        x = torch.randn(2, 3)
        checkpoint(lambda t: torch.tanh(lin(t)), x, use_reentrant=False).sum().backward()
        g1 = lin.weight.grad.clone()
        lin.zero_grad()
        torch.tanh(lin(x)).sum().backward()
        """, ok(lambda doc, ns, e: assert_true(torch.allclose(ns["g1"], ns["lin"].weight.grad)))),
    "model.eval() does not stop gradients": Question(
        "I called model.eval(); why do my weights still get gradients?", """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))
        model.eval()
        model(torch.randn(2, 3)).sum().backward()
        """, ok(lambda doc, ns, e: assert_true(ns["model"][0].weight.grad is not None
                                                and "no_gradient" not in codes(doc)))),
    "tied weights": Question(
        "My decoder shares the encoder's weight; is its gradient summed?", """
        import torch
        torch.manual_seed(0)
        enc = torch.nn.Linear(4, 2, bias=False)
        x = torch.randn(3, 4)
        recon = (enc(x)) @ enc.weight
        ((recon - x) ** 2).mean().backward()
        """, ok(lambda doc, ns, e: assert_true(backwards(doc)[0]["uses"]["weight"] == 2))),
}


def assert_true(value) -> None:
    assert value


def plain_run(code: str) -> tuple[dict, BaseException | None]:
    namespace: dict = {"__name__": "__main__"}
    try:
        exec(compile(code, "<plain>", "exec"), namespace)  # noqa: S102 - the test's own script
    except Exception as exc:  # noqa: BLE001 - the error is the question's fact
        return namespace, exc
    return namespace, None


def resolve(name: str, ns: dict) -> torch.Tensor | None:
    """The script's tensor the Trace calls `name`: a variable, or a model's parameter path."""
    value = ns.get(name)
    if isinstance(value, torch.Tensor):
        return value
    head, _, rest = name.partition(".")
    if isinstance(ns.get(head), torch.nn.Module) and rest:
        try:
            return ns[head].get_parameter(rest)
        except AttributeError:
            return None
    modules = [m for m in ns.values() if isinstance(m, torch.nn.Module)]
    for m in modules:
        try:
            return m.get_parameter(name)
        except AttributeError:
            continue
    return None


def numbers(values):
    """A summary's values as floats (JSON writes NaN and infinities as strings)."""
    if isinstance(values, list):
        return [numbers(v) for v in values]
    return float(values.replace("Infinity", "inf")) if isinstance(values, str) else values


def same(summary: dict | None, tensor: torch.Tensor | None) -> bool:
    if summary is None or tensor is None:
        return summary is None and tensor is None
    t = tensor.detach().double()
    if "values" in summary:
        got = torch.tensor(numbers(summary["values"]), dtype=torch.float64).reshape(t.shape)
        return bool(torch.allclose(got, t, rtol=TOL, atol=1e-6, equal_nan=True))
    norm = summary.get("norm")
    return isinstance(norm, str) or math.isclose(norm, float(t.norm()), rel_tol=TOL)


def total(summary: dict | None) -> float:
    if summary is None:
        return 0.0
    if "values" in summary:
        return float(torch.tensor(numbers(summary["values"]), dtype=torch.float64).sum())
    mean = summary.get("mean")
    return float(mean) * summary.get("numel", 1) if not isinstance(mean, str) else math.nan


def no_contradiction(doc: dict, ns: dict) -> None:
    for name, param in doc["params"].items():
        tensor = resolve(name, ns)
        if tensor is None:
            continue  # a tensor the script no longer holds
        assert same(param["grad"], tensor.grad), (name, param["grad"], tensor.grad)
    for event in backwards(doc):
        if event["error"]:
            continue
        hooked, dropped = set(event.get("hooks") or {}), set(event.get("dropped") or ())
        for name, uses in event["contributions"].items():
            if name in hooked or name in dropped or event.get("inputs"):
                continue
            grads = event["grads"].get(name)
            if grads is None:
                continue
            added = sum(total(u["grad"]) for u in uses)
            want = total(grads["after"]) - total(grads["before"])
            if math.isfinite(added) and math.isfinite(want):
                assert added == pytest.approx(want, rel=1e-4, abs=1e-5), (name, event["index"])
    for step in steps(doc):
        for name, change in step["params"].items():
            check = change.get("check") or {}
            assert check.get("matches", True), (step["index"], name, check)


def test_the_corpus_has_thirty_questions():
    assert len(QUESTIONS) >= 30


@pytest.mark.parametrize("key", list(QUESTIONS))
def test_each_answer_is_what_pytorch_did(trace_source, key):
    question = QUESTIONS[key]
    code = textwrap.dedent(question.script).lstrip("\n")
    ns, error = plain_run(code)
    doc = trace_source(code)
    question.fact(doc, ns, error)
    no_contradiction(doc, ns)


def test_the_check_finds_a_claim_that_contradicts_pytorch(trace_source):
    """A check that cannot fail would prove nothing: a Trace whose .grad, whose bars or whose
    step check say something PyTorch did not do is caught."""
    code = textwrap.dedent(QUESTIONS["zero_grad between passes"].script).lstrip("\n")
    ns, _ = plain_run(code)
    doc = trace_source(code)
    no_contradiction(doc, ns)
    doc["params"]["w"]["grad"]["values"] = [3.0, 4.0]
    with pytest.raises(AssertionError):
        no_contradiction(doc, ns)
    doc = trace_source(code)
    backwards(doc)[1]["contributions"]["w"][0]["grad"]["values"] = [9.0, 9.0]
    with pytest.raises(AssertionError):
        no_contradiction(doc, ns)
