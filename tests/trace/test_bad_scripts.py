"""A script that fails gets a clear error pointing at its own line, never at ours."""

from __future__ import annotations

import json

import jsonschema

from app.format import load_schema


def check(doc: dict, kind: str, line: int | None) -> dict:
    jsonschema.validate(doc, load_schema())
    err = doc["error"]
    assert err is not None and err["type"] == kind, err
    assert err["line"] == line
    # the message is about the script, not about autograd-lab's insides
    assert "app/trace" not in err["message"]
    assert all("app/trace" not in f.get("code", "") for f in err.get("frames", []))
    return err


def test_syntax_error(trace_source):
    err = check(trace_source("import torch\nx = (1,\ny = 2\n"), "SyntaxError", 2)
    assert "line 2" in err["message"]


def test_exception_in_forward(trace_source):
    doc = trace_source("""
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 2)
            def forward(self, x):
                return self.fc(x.view(-1, 5))   # 5 does not divide the input
        Net()(torch.randn(3, 4)).sum().backward()
    """)
    err = check(doc, "RuntimeError", 9)
    assert [f["line"] for f in err["frames"]] == [10, 9]
    assert "shape" in err["message"]


def test_exception_in_custom_backward(trace_source):
    doc = trace_source("""
        import torch
        class Broken(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2
            @staticmethod
            def backward(ctx, g):
                raise ValueError("this backward is not written yet")
        x = torch.randn(3, requires_grad=True)
        Broken.apply(x).sum().backward()
    """)
    err = check(doc, "ValueError", 9)
    assert err["message"] == "this backward is not written yet"
    (event,) = [e for e in doc["events"] if e["kind"] == "backward"]
    assert event["error"]["type"] == "ValueError"  # the event shows where the pass stopped
    assert event["order"][:2] == event["graph"]["roots"][:1] + event["order"][1:2]


def test_script_with_no_tensor(trace_source):
    err = check(trace_source("print('hello')\n"), "NoGraph", None)
    assert "made no tensor at all" in err["message"]


def test_script_whose_tensors_need_no_grad(trace_source):
    err = check(trace_source("import torch\nx = torch.ones(3) * 2\n"), "NoGraph", None)
    assert "none of them has a grad_fn" in err["message"]


def test_nonzero_exit(trace_source):
    check(trace_source("import sys\nsys.exit(3)\n"), "ScriptExit", 2)


def test_output_is_captured_and_capped(trace_source):
    doc = trace_source("""
        import sys, torch
        print("to stdout")
        print("to stderr", file=sys.stderr)
        for i in range(40000):
            print("0123456789")
        w = torch.ones(1, requires_grad=True)
        (w * 2).sum().backward()
    """)
    assert doc["stdout"].startswith("to stdout\n")
    assert doc["stderr"] == "to stderr\n"
    assert len(doc["stdout"]) < 300 * 1024
    assert "more characters of output were not kept" in doc["stdout"]


def test_anomaly_report_shows_the_script_frames_not_ours(trace_source):
    doc = trace_source("""
        import torch
        x = torch.randn(3, requires_grad=True)
        h = torch.tanh(x)
        h[0] = 0
        h.sum().backward()
    """)
    check(doc, "RuntimeError", 6)
    assert "Error detected in TanhBackward0" in doc["stderr"]
    assert "line 4, in <module>" in doc["stderr"]  # where tanh was called
    assert "app/trace" not in doc["stderr"]


def test_endless_recursion_folds_like_python_s_traceback(trace_source):
    """`sys.setrecursionlimit(10**6)` and a plain recursion once made a 51 MB error."""
    doc = trace_source("""
        import sys
        sys.setrecursionlimit(10**6)
        def down(n):
            return down(n + 1)
        down(0)
    """)
    err = doc["error"]
    assert err["type"] == "RecursionError" and err["line"] == 5
    frames = err["frames"]
    # the call at line 6, then line 5 three times, the third counting every other repeat
    assert [f["line"] for f in frames] == [6, 5, 5, 5]
    assert frames[-1]["repeated"] > 10_000 and "repeated" not in frames[1]
    assert frames[-1]["code"] == "return down(n + 1)"
    assert len(json.dumps(doc)) < 64 * 1024


def test_recursion_through_two_functions_keeps_both_ends(trace_source):
    doc = trace_source("""
        def ping(n):
            return pong(n + 1)
        def pong(n):
            return ping(n + 1)
        ping(0)
    """)
    frames = doc["error"]["frames"]
    assert len(frames) == 101 and frames[50]["omitted"] > 0
    assert frames[0]["line"] == 6 and frames[-1]["line"] in (3, 5)
    assert {f["function"] for f in frames if "function" in f} == {"<module>", "ping", "pong"}


def test_the_script_is_compiled_as_python_compiles_it(trace_source, tmp_path):
    """The tracer's own `from __future__ import annotations` once leaked into the script: an
    annotation that names nothing failed plainly (NameError at the `def`) and ran under the
    tracer, which then showed a backward the script never made."""
    import subprocess
    import sys

    code = ("import torch\n\n\ndef scale(x: NotDefinedAnywhere) -> None:\n    return x\n\n\n"
            "w = torch.ones(2, requires_grad=True)\n(w * 2).sum().backward()\n")
    (tmp_path / "plain.py").write_text(code)
    plain = subprocess.run([sys.executable, str(tmp_path / "plain.py")], capture_output=True,
                           text=True, timeout=120)
    assert plain.returncode != 0 and "NameError" in plain.stderr  # what Python itself says
    doc = trace_source(code)
    check(doc, "NameError", 4)
    assert doc["events"] == []  # no backward the script never reached


def test_code_in_a_namespace_is_compiled_as_python_compiles_it():
    from app.trace.in_namespace import trace_source as trace_in_namespace

    doc = trace_in_namespace("def f(x: NotDefinedAnywhere):\n    return x\n", {})
    assert doc["error"] is not None and doc["error"]["type"] == "NameError"
