"""The script's gradcheck and gradgradcheck calls are events (issue 24): one representative pass
of the checked function, drawn, with the check's verdict and tolerances; the script's own
results (its verdict, its error, its tensors, its random stream) are what torch gives it
untraced."""

from __future__ import annotations

import contextlib
import inspect
import io
import json

import jsonschema
import pytest
import torch

from app.format import load_schema, validate
from app.trace.recorder import RecordingLimits
from tests.trace_facts import backward_events, contribution_sum, diagnostics, values

CUBE = """\
import torch


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * {derivative}


torch.manual_seed(0)
x = torch.randn(4, dtype=torch.double, requires_grad=True)
"""
RIGHT = CUBE.format(derivative="3 * x ** 2")
WRONG = CUBE.format(derivative="2 * x ** 2")  # not x**3's derivative
CALL_LINE = RIGHT.count("\n") + 1  # the line each script below adds first


def _inputs() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(4, dtype=torch.double)


def _torch_gradient_of_cube() -> torch.Tensor:
    """What torch.autograd.grad returns for x**3 (torch's own pow), ones as its gradient."""
    leaf = _inputs().requires_grad_()
    (grad,) = torch.autograd.grad((leaf ** 3).sum(), leaf)
    return grad


def _defaults(check) -> dict:
    return {k: p.default for k, p in inspect.signature(check).parameters.items()
            if k in ("eps", "atol", "rtol")}


def _valid(doc: dict) -> None:
    as_written = json.loads(json.dumps(doc, default=str))
    validate(as_written)
    jsonschema.validate(as_written, load_schema())


def _untraced(source: str) -> tuple[str, BaseException | None]:
    """The script run by plain exec: its output, and the exception it ended with."""
    out = io.StringIO()
    error = None
    with contextlib.redirect_stdout(out):
        try:
            exec(compile(source, "untraced.py", "exec"), {"__name__": "__main__"})  # noqa: S102
        except Exception as exc:  # noqa: BLE001 - the script's own ending is the result
            error = exc
    return out.getvalue(), error


def test_a_script_that_only_gradchecks_a_function_succeeds_with_the_check_drawn(trace_source):
    doc = trace_source(RIGHT + "print(torch.autograd.gradcheck(Cube.apply, (x,)))\n")
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == "True\n"
    _valid(doc)
    # one event: the script's check; custom_check's own gradcheck of Cube is not the script's
    (ev,) = backward_events(doc)
    check = ev["gradcheck"]
    assert check["check"] == "gradcheck" and check["passed"] is True
    assert check["function"] == "Cube" and check["line"] == CALL_LINE == ev["line"]
    assert {k: check[k] for k in ("eps", "atol", "rtol")} == _defaults(torch.autograd.gradcheck)
    assert not ev.get("synthetic") and "gradcheck" in ev["call"]
    assert any("Cube" in n["name"] for n in ev["graph"]["nodes"])
    # what the pass recorded is what torch returns for x**3 at those inputs: 3 x**2
    (name,) = ev["inputs"]
    assert name == "x"  # the copy stands for the script's x
    expected = _torch_gradient_of_cube()
    (use,) = ev["contributions"][name]
    assert torch.allclose(values(use["grad"]), expected)
    assert torch.allclose(values(ev["results"][0]), expected)
    # the script's x is the parameter the pass reached; its .grad is untouched
    assert doc["params"]["x"]["uses"] == {str(ev["index"]): 1}
    assert doc["params"]["x"]["grad"] is None
    assert diagnostics(doc, "not_drawn") == [] and diagnostics(doc, "no_gradient") == []
    (said,) = diagnostics(doc, "gradcheck_call")
    assert said["level"] == "info" and said["event"] == ev["index"]
    assert f"line {CALL_LINE} passed" in said["message"]


def test_a_wrong_backward_checked_without_raising_is_a_failed_check(trace_source):
    doc = trace_source(WRONG + "print(torch.autograd.gradcheck(Cube.apply, (x,), "
                               "raise_exception=False, atol=1e-4))\n")
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == "False\n"  # the script's own verdict
    _valid(doc)
    (ev,) = backward_events(doc)
    assert ev["gradcheck"]["passed"] is False  # and the event's agrees
    assert ev["gradcheck"]["atol"] == 1e-4  # the tolerance the script gave
    # the pass ran the script's backward as it is: 2 x**2, which is not torch's 3 x**2
    x = _inputs()
    got = values(ev["contributions"]["x"][0]["grad"])
    assert torch.allclose(got, 2 * x ** 2)
    assert not torch.allclose(got, 3 * x ** 2)
    (said,) = diagnostics(doc, "gradcheck_call")
    assert said["level"] == "warning" and "failed" in said["message"]


def test_a_wrong_backward_checked_with_raising_is_the_scripts_gradcheck_error(trace_source):
    source = WRONG + "torch.autograd.gradcheck(Cube.apply, (x,))\nprint('not reached')\n"
    out, untraced = _untraced(source)
    assert type(untraced).__name__ == "GradcheckError" and out == ""
    doc = trace_source(source)
    _valid(doc)
    err = doc["error"]
    assert err["type"] == "GradcheckError" and err["line"] == CALL_LINE
    assert err["message"] == str(untraced).strip()  # torch's own words, unchanged
    assert doc["stdout"] == ""
    (ev,) = backward_events(doc)
    assert ev["gradcheck"]["passed"] is False
    assert ev["gradcheck"]["message"] in str(untraced).splitlines()[0]


def test_gradgradcheck_is_drawn_with_the_graph_its_gradient_carries(trace_source):
    doc = trace_source(RIGHT + "from torch.autograd import gradgradcheck\n"
                               "print(gradgradcheck(Cube.apply, (x,)))\n")
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == "True\n"
    _valid(doc)
    (ev,) = backward_events(doc)
    check = ev["gradcheck"]
    assert check["check"] == "gradgradcheck" and check["passed"] is True
    assert check["line"] == CALL_LINE + 1
    assert {k: check[k] for k in ("eps", "atol", "rtol")} == \
        _defaults(torch.autograd.gradgradcheck)
    # create_graph=True: the gradient's own graph, what gradgradcheck differentiates, is kept
    assert ev["create_graph"] is True
    view = doc["views"][ev["gradient_view"]]
    assert view["event"] == ev["index"] and view["graph"]["nodes"]
    assert torch.allclose(values(ev["contributions"]["x"][0]["grad"]),
                          _torch_gradient_of_cube())


@pytest.mark.parametrize("imported", [
    "from torch.autograd import gradcheck",
    "from torch.autograd.gradcheck import gradcheck",
    "gradcheck = torch.autograd.gradcheck",
])
def test_the_script_keeps_its_tensors_hooks_and_random_stream(trace_source, imported):
    """The pass runs on copies under a forked random stream: after the check, x.grad, the
    script's hook on x and torch.rand give what they give untraced (the checked function
    draws a random number, so a pass that did not fork the stream would shift it)."""
    source = (RIGHT + f"{imported}\n"
              "calls = []\n"
              "x.register_hook(lambda g: calls.append(1))\n"
              "def f(t):\n"
              "    return Cube.apply(t) + 0 * torch.rand(())\n"
              "print(gradcheck(f, (x,)))\n"
              "print(x.grad, len(calls), x.requires_grad, x.is_leaf)\n"
              "print(torch.rand(3).tolist())\n")
    out, error = _untraced(source)
    assert error is None
    doc = trace_source(source)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == out
    (ev,) = backward_events(doc)
    assert ev["gradcheck"]["passed"] is True and ev["gradcheck"]["function"] == "f"


def test_the_pass_puts_back_the_buffers_of_the_modules_it_runs(trace_source):
    """The checked function runs a BatchNorm in training mode: every call moves its running
    statistics and batch count. After the representative passes of a gradcheck and a
    gradgradcheck, they are what an untraced run leaves (the check's own calls moved them)."""
    source = """\
import torch
from torch.autograd import gradcheck, gradgradcheck
torch.manual_seed(0)
lin = torch.nn.Linear(3, 2).double()
bn = torch.nn.BatchNorm1d(3).double()
def f(x):
    return lin(bn(x)).tanh()
x = torch.randn(4, 3, dtype=torch.double, requires_grad=True)
print(gradcheck(f, (x,)), gradgradcheck(f, (x,)))
print(int(bn.num_batches_tracked), bn.running_mean.tolist(), bn.running_var.tolist())
"""
    out, error = _untraced(source)
    assert error is None
    assert int(out.splitlines()[1].split()[0]) > 0  # the checks did move them
    doc = trace_source(source)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == out
    assert [e["gradcheck"]["check"] for e in backward_events(doc)] == \
        ["gradcheck", "gradgradcheck"]
    assert diagnostics(doc, "tracer_error") == []


def test_one_tensor_given_twice_is_two_inputs_each_with_its_own_gradient(trace_source):
    """gradcheck(f, (x, x)) checks f's two inputs separately; the pass's contributions to each
    are what torch.autograd.grad returns for each, not their sum under one name."""
    doc = trace_source(RIGHT + "def f(a, b):\n"
                               "    return (a * b * b).sum()\n"
                               "print(torch.autograd.gradcheck(f, (x, x)))\n")
    assert doc["error"] is None, doc["error"]
    (ev,) = backward_events(doc)
    assert ev["inputs"] == ["x", "x (input 2)"]
    a, b = _inputs().requires_grad_(), _inputs().requires_grad_()
    expected = torch.autograd.grad((a * b * b).sum(), (a, b))
    for name, grad in zip(ev["inputs"], expected, strict=True):
        assert torch.allclose(contribution_sum(ev, name), grad), name
    # `b` is used twice in the pass, `a` once: the note says so of the second input only
    assert [d["params"] for d in diagnostics(doc, "multiple_uses")] == [["x (input 2)"]]
    assert diagnostics(doc, "tracer_error") == []
    _valid(doc)


def test_inputs_the_script_holds_under_no_name_are_named_by_their_place(trace_source):
    doc = trace_source("""\
        import torch
        torch.manual_seed(0)
        f = lambda a, b: (a.sin() * b).sum()
        print(torch.autograd.gradcheck(f, (torch.randn(3, dtype=torch.double, requires_grad=True),
                                           torch.randn(3, dtype=torch.double, requires_grad=True))))
        """)
    assert doc["error"] is None, doc["error"]
    (ev,) = backward_events(doc)
    assert ev["inputs"] == ["input 1", "input 2"]
    torch.manual_seed(0)
    a = torch.randn(3, dtype=torch.double, requires_grad=True)
    b = torch.randn(3, dtype=torch.double, requires_grad=True)
    expected = torch.autograd.grad((a.sin() * b).sum(), (a, b))
    for name, grad in zip(ev["inputs"], expected, strict=True):
        assert torch.allclose(contribution_sum(ev, name), grad), name
    assert diagnostics(doc, "tracer_error") == []
    _valid(doc)


def test_a_check_past_the_recorded_passes_is_only_noted(trace_source):
    doc = trace_source(RIGHT + "Cube.apply(x).sum().backward()\n"
                               "print(torch.autograd.gradcheck(Cube.apply, (x,)))\n",
                       limits=RecordingLimits(max_backward_events=1))
    assert doc["error"] is None, doc["error"]
    (ev,) = backward_events(doc)
    assert "gradcheck" not in ev
    assert doc["events_skipped"]["backward"] == 0  # our pass was not run, so not skipped
    (note,) = diagnostics(doc, "not_drawn")
    assert note["message"].startswith(f"`torch.autograd.gradcheck` at line {CALL_LINE + 1}: "
                                      "checked, not drawn")


def test_a_check_in_a_loop_is_one_event_and_checks_leave_room_for_the_scripts_passes(
        trace_source):
    """Twelve checks at one line are one pass that counts them; past five drawn checks the
    rest are noted, so a script that checks first and trains after keeps its own passes."""
    from app.trace.gradcheck_events import MAX_CHECK_EVENTS

    lines = "".join(f"torch.autograd.gradcheck(torch.{f}, (x,))\n"
                    for f in ("sin", "cos", "exp", "tanh", "sigmoid", "atan"))
    doc = trace_source(RIGHT + "for _ in range(12):\n"
                               "    torch.autograd.gradcheck(Cube.apply, (x,))\n"
                       + lines + "Cube.apply(x).sum().backward()\n")
    assert doc["error"] is None, doc["error"]
    events = backward_events(doc)
    checks = [e["gradcheck"] for e in events if "gradcheck" in e]
    assert len(checks) == MAX_CHECK_EVENTS
    assert checks[0]["function"] == "Cube" and checks[0]["calls"] == 12
    assert checks[0]["line"] == CALL_LINE + 1
    assert [c["function"] for c in checks[1:]] == ["torch.sin", "torch.cos", "torch.exp",
                                                    "torch.tanh"]
    notes = [d["message"] for d in diagnostics(doc, "not_drawn")]
    assert [m.split(":")[0] for m in notes] == [f"`torch.autograd.gradcheck` at line {n}"
                                                 for n in (CALL_LINE + 6, CALL_LINE + 7)]
    # not drawn, but their verdicts are said (the script asked for them)
    assert notes[0].endswith("`torch.sigmoid`: passed.") and \
        notes[1].endswith("`torch.atan`: passed."), notes
    # the script's own backward is drawn after them, and it filled x.grad as torch would
    own = events[-1]
    assert "gradcheck" not in own and own["line"] == CALL_LINE + 8
    assert torch.allclose(values(doc["params"]["x"]["grad"]), 3 * _inputs() ** 2)


def test_the_check_is_drawn_in_the_sandboxed_worker_and_its_report_is_valid():
    """The real path: a confined worker writes the report, the runner validates it (a report
    that failed the schema would come back as a WorkerFailed error with no events)."""
    from app.runner import trace_in_sandbox

    doc = trace_in_sandbox(source=RIGHT + "print(torch.autograd.gradcheck(Cube.apply, (x,)))\n",
                           name="cube.py", timeout=60)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == "True\n"
    (ev,) = backward_events(doc)
    assert ev["gradcheck"]["passed"] is True and ev["gradcheck"]["line"] == CALL_LINE
    assert torch.allclose(values(ev["contributions"]["x"][0]["grad"]),
                          _torch_gradient_of_cube())


def test_a_custom_functions_failing_input_is_named_as_its_forward_names_it(trace_source):
    """gradcheck counts only the inputs that require grad: for forward(ctx, k, x) with k a
    constant tensor, its "input 0" is x. The page blamed the first argument."""
    code = """
        import torch

        class Scaled(torch.autograd.Function):
            @staticmethod
            def forward(ctx, k, x):
                ctx.save_for_backward(k)
                return k * x

            @staticmethod
            def backward(ctx, g):
                (k,) = ctx.saved_tensors
                return None, g * k * 2   # twice the true gradient

        k = torch.tensor([3.0, 3.0])
        x = torch.ones(2, requires_grad=True)
        Scaled.apply(k, x).sum().backward()
    """
    import textwrap

    import torch
    from torch.autograd.gradcheck import GradcheckError

    namespace: dict = {}
    exec(compile(textwrap.dedent(code).split("k = torch")[0], "<plain>", "exec"), namespace)  # noqa: S102
    k64 = torch.tensor([3.0, 3.0], dtype=torch.float64)
    x64 = torch.ones(2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(GradcheckError, match="with respect to input 0"):  # PyTorch's words: x
        torch.autograd.gradcheck(lambda k, x: namespace["Scaled"].apply(k, x), (k64, x64))
    doc = trace_source(code)
    checks = [n["gradcheck"] for e in doc["events"] if e["kind"] == "backward"
              for n in e["graph"]["nodes"] if n.get("gradcheck")]
    assert checks and checks[0]["passed"] is False
    assert "input 0 (`x`, forward's argument 2)" in checks[0]["message"], checks[0]["message"]
