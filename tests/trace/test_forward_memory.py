"""The allocator's peak during a pass's forward, and what it still held when backward began
(app/trace/forward_memory.py), against PyTorch itself: the same forward run plainly under
`torch.profiler.profile(profile_memory=True)`, read through another route (the operator
events' own memory, summed in time order), and sizes computed by hand from numel and the
element size. A grad-recording forward keeps what autograd saves; a no-grad one frees each
intermediate as it is rebound; a checkpoint frees its region's."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
N = 250_000  # elements: one float32 tensor is 1 MB
SIZE = N * torch.empty(0, dtype=torch.float32).element_size()
# the scalars around (a loss, the 1.0 a multiplication wraps) and the tracer's own few bytes
SLACK = 1024

SETUP = f"""
import torch
N = {N}
w = torch.ones(N, requires_grad=True)
"""
GRAD = """
h = w * 1.0
for _ in range(4):
    h = h.sin()      # each sin saves its input: kept while the graph lives
loss = h.sum()
"""
NO_GRAD = """
h = w * 1.0
with torch.no_grad():
    for _ in range(4):
        h = h.sin()  # no graph: the previous h is freed as h is rebound
loss = (h * w).sum()
"""


def plain_profile(setup: str, forward: str) -> tuple[int, int]:
    """(peak, held) of `forward` run plainly after `setup`: torch.profiler's events in time
    order, each operator's own allocations and the frees between them, summed."""
    namespace: dict = {"__name__": "__main__"}
    exec(compile(textwrap.dedent(setup), "<setup>", "exec"), namespace)  # noqa: S102
    gc.collect()  # an earlier test's garbage is not this forward's
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        exec(compile(textwrap.dedent(forward), "<forward>", "exec"), namespace)  # noqa: S102
    total = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        total += event.self_cpu_memory_usage
        peak = max(peak, total)
    return peak, total


def trace_fresh(trace_source, code: str) -> dict:
    """The Trace, traced in this process: with an earlier test's cyclic garbage collected
    first, so that no collection frees it in the middle of this forward (the allocator's
    total would go down by it: real, but not this script's)."""
    gc.collect()
    return trace_source(code)


def first_pass(doc: dict) -> dict:
    assert doc["error"] is None, doc["error"]
    return next(e for e in doc["events"] if e["kind"] == "backward")["forward_memory"]


def test_a_grad_forward_keeps_what_a_no_grad_forward_frees(trace_source):
    grad = first_pass(trace_fresh(trace_source, SETUP + GRAD + "loss.backward()\n"))
    no_grad = first_pass(trace_fresh(trace_source, SETUP + NO_GRAD + "loss.backward()\n"))
    assert grad["device"] == no_grad["device"] == "cpu"
    # `h = w * 1.0`: the first node
    assert grad["line"] == no_grad["line"] == (SETUP + GRAD).splitlines().index("h = w * 1.0") + 1
    # by hand: w * 1.0 and four sin outputs, all saved
    assert 5 * SIZE <= grad["held_bytes"] <= grad["peak_bytes"] < 5 * SIZE + SLACK
    # by hand: at most two of them at once (a sin's input and output), one left
    assert 2 * SIZE <= no_grad["peak_bytes"] < 2 * SIZE + SLACK
    assert SIZE <= no_grad["held_bytes"] < SIZE + SLACK
    # and as torch's profiler reads the same forward run plainly
    for traced, forward in ((grad, GRAD), (no_grad, NO_GRAD)):
        peak, held = plain_profile(SETUP, forward)
        assert abs(traced["peak_bytes"] - peak) < SLACK
        assert abs(traced["held_bytes"] - held) < SLACK


CHECKPOINTED = """
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
torch.manual_seed(0)
blocks = [nn.Sequential(nn.Linear(256, 1024), nn.Tanh(), nn.Linear(1024, 256))
          for _ in range(2)]
head = nn.Linear(256, 1)
x = torch.randn(256, 256)
"""
FORWARD = """
y = x
for block in blocks:
    y = checkpoint(block, y, use_reentrant=False) if CHECKPOINT else block(y)
loss = head(y).pow(2).mean()
"""


@pytest.mark.slow
def test_a_checkpoint_lowers_the_peak_by_what_it_frees(trace_source):
    """Each block's tanh output (256 x 1024 float32, 1 MB) is saved for backward; its first
    Linear's output is not (tanh saves its result). Without checkpoints both tanh outputs are
    held; with them, neither, and the peak is one block's two 1 MB tensors at once, not two
    blocks' worth: lower by the first block's tanh output."""
    hidden = 256 * 1024 * 4
    traced, plain = {}, {}
    for flag in (True, False):
        setup = f"CHECKPOINT = {flag}\n" + textwrap.dedent(CHECKPOINTED)
        traced[flag] = first_pass(trace_fresh(trace_source, setup + textwrap.dedent(FORWARD) +
                                               "loss.backward()\n"))
        plain[flag] = plain_profile(setup, FORWARD)
    # the first checkpoint keeps the CPU generator's state (torch.get_rng_state()), taken
    # before its region's first node, where the traced forward starts: the plain run's start
    # is before it
    rng = {True: torch.get_rng_state().nbytes, False: 0}
    for flag in (True, False):
        assert abs(traced[flag]["peak_bytes"] - (plain[flag][0] - rng[flag])) < SLACK
        assert abs(traced[flag]["held_bytes"] - (plain[flag][1] - rng[flag])) < SLACK
    held_saving = traced[False]["held_bytes"] - traced[True]["held_bytes"]
    peak_saving = traced[False]["peak_bytes"] - traced[True]["peak_bytes"]
    # less the second checkpoint's generator state, kept inside the forward
    assert abs(held_saving - (2 * hidden - rng[True])) < SLACK
    assert abs(peak_saving - (hidden - rng[True])) < SLACK
    assert abs(traced[True]["peak_bytes"] - 2 * hidden) < hidden  # one block at a time


LOOP = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(128, 64)
for step in range(3):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
"""


def test_every_kept_pass_of_a_loop_is_measured(trace_source):
    doc = trace_fresh(trace_source, LOOP)
    passes = [e for e in doc["events"] if e["kind"] == "backward"]
    assert len(passes) == 3
    peak, held = plain_profile(LOOP.split("for step")[0],
                               "loss = model(x).pow(2).mean()\n")
    for event in passes:
        memory = event["forward_memory"]
        assert memory["device"] == "cpu"
        assert memory["line"] == LOOP.splitlines().index("    loss = model(x).pow(2).mean()") + 1
        assert abs(memory["peak_bytes"] - peak) < SLACK
        # the last pass's loss and output are freed as the new ones are bound: a few bytes
        assert abs(memory["held_bytes"] - held) < SLACK


def test_a_pass_with_no_forward_of_its_own_gets_no_numbers(trace_source):
    twice = "loss.backward(retain_graph=True)\nloss.backward()\n"
    doc = trace_fresh(trace_source, SETUP + GRAD + twice)
    first, second = [e for e in doc["events"] if e["kind"] == "backward"]
    assert "forward_memory" in first and "forward_memory" not in second


SCRIPT_PROFILES = SETUP + """
for step in range(2):
    if step == 1:
        with torch.profiler.profile(profile_memory=True) as prof:
            loss = (w * 2.0).sum()
        print("its own profiler saw", sum(e.name == "aten::mul" for e in prof.events()))
    else:
        loss = (w * 2.0).sum()
    loss.backward()
"""


def test_a_script_that_runs_torchs_profiler_keeps_it(trace_source):
    """One profiler runs at a time: the script's, once it starts one. It sees its own work as
    it would plainly; the passes from then on say they were not measured, and why."""
    namespace: dict = {"__name__": "__main__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(SCRIPT_PROFILES, "<plain>", "exec"), namespace)  # noqa: S102
    doc = trace_fresh(trace_source, SCRIPT_PROFILES)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == out.getvalue() == "its own profiler saw 1\n"
    first, second = [e for e in doc["events"] if e["kind"] == "backward"]
    assert first["forward_memory"]["device"] == "cpu"
    assert "started torch's profiler itself" in second["forward_memory"]["unmeasured"]


def test_the_profiler_writes_nothing_to_the_scripts_output(trace_source):
    doc = trace_fresh(trace_source, SETUP + GRAD + "loss.backward()\n")
    assert doc["stdout"] == doc["stderr"] == ""


CUDA_FORWARD = """
h = w * 1.0
for _ in range(4):
    h = h.sin()
loss = h.sum()
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_numbers_are_torch_cudas_own(trace_source):
    setup = SETUP.replace("torch.ones(N, requires_grad=True)",
                          "torch.ones(N, device='cuda', requires_grad=True)")
    memory = first_pass(trace_fresh(trace_source, setup + CUDA_FORWARD + "loss.backward()\n"))
    namespace: dict = {"__name__": "__main__"}
    exec(compile(setup, "<setup>", "exec"), namespace)  # noqa: S102
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    exec(compile(CUDA_FORWARD, "<forward>", "exec"), namespace)  # noqa: S102
    peak, held = torch.cuda.max_memory_allocated() - start, torch.cuda.memory_allocated() - start
    assert memory["device"] == "cuda"
    # the caching allocator rounds each block up to 512 bytes: a scalar of the tracer's own
    # would be one such block
    assert abs(memory["peak_bytes"] - peak) < SLACK and abs(memory["held_bytes"] - held) < SLACK
    assert 5 * SIZE <= held <= peak  # w * 1.0 and four sins, saved (in 512-byte blocks)


def test_a_kernels_cell_is_not_measured(monkeypatch):
    """In a kernel the profiler never saw the earlier cells' tensors allocated: freeing one
    (a variable rebound) would go uncounted, and torch's CPU allocator would warn of it into
    the notebook. No numbers there, rather than wrong ones: not from a cell's second pass on
    either, whose forward is not even looked for."""
    from app.trace.forward_memory import ForwardMemory
    from app.trace.in_namespace import trace_source as trace_in_namespace

    looked = []
    original = ForwardMemory.forward_op

    def forward_op(self, args):
        looked.append(len(args))
        return original(self, args)
    monkeypatch.setattr(ForwardMemory, "forward_op", forward_op)
    namespace: dict = {}
    earlier = trace_in_namespace(SETUP + GRAD + "loss.backward()\n", namespace)
    again = trace_in_namespace(GRAD + "loss.backward()\n", namespace)  # frees the last h
    three = trace_in_namespace(("w.grad = None\n" + GRAD + "loss.backward()\n") * 3, namespace)
    for doc in (earlier, again, three):
        assert doc["error"] is None
        passes = [e for e in doc["events"] if e["kind"] == "backward"]
        assert passes and all("forward_memory" not in e for e in passes)
    assert len([e for e in three["events"] if e["kind"] == "backward"]) == 3
    assert looked == []
    # the cells ran, and their passes were recorded: the last cell's .grad is plain torch's
    plain: dict = {}
    exec(compile(SETUP + GRAD + "loss.backward()\n", "<plain>", "exec"), plain)  # noqa: S102
    assert torch.equal(namespace["w"].grad, plain["w"].grad)


MANY = 300  # operations run between two passes (two per line: detach, add)
BOUNDED = SETUP + GRAD + "loss.backward()\n" + f"""
for _ in range({MANY // 2}):
    y = w.detach() + 1
w.grad = None
""" + GRAD + """loss.backward()
print(w.grad.unique().tolist())
"""


def test_past_the_operation_bound_the_profiler_stops(trace_source, monkeypatch):
    """The profiler's record grows with every operation until the last kept backward: past
    MAX_OPERATIONS it stops. A pass before then keeps its numbers; one after says why it has
    none; the script's gradients are plain torch's. The next run counts from zero."""
    from app.trace import forward_memory

    bound = MANY // 2
    # the first pass's forward and backward (GRAD: a handful of operations) fit under it
    assert GRAD.count("\n") + 10 < bound
    monkeypatch.setattr(forward_memory, "MAX_OPERATIONS", bound)
    doc = trace_fresh(trace_source, BOUNDED)
    assert doc["error"] is None, doc["error"]
    first, second = [e for e in doc["events"] if e["kind"] == "backward"]
    peak, held = plain_profile(SETUP, GRAD)
    assert abs(first["forward_memory"]["peak_bytes"] - peak) < SLACK
    assert abs(first["forward_memory"]["held_bytes"] - held) < SLACK
    # the loop alone ran MANY operations, twice the bound: no numbers, and the page says why
    assert list(second["forward_memory"]) == ["unmeasured"]
    assert f"more than {bound} torch operations" in second["forward_memory"]["unmeasured"]
    plain: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(BOUNDED, "<plain>", "exec"), plain)  # noqa: S102
    assert doc["stdout"] == out.getvalue()
    assert len(out.getvalue()) > len("[]\n")  # one value: every element's gradient alike
    # the next run, under the same bound, is measured from its start
    again = first_pass(trace_fresh(trace_source, SETUP + GRAD + "loss.backward()\n"))
    assert abs(again["peak_bytes"] - peak) < SLACK and abs(again["held_bytes"] - held) < SLACK


STEPS = 15  # Adam steps between two passes: each is about 13 operations of its own arithmetic
# (no graph: the mode hands them straight to torch) and a few reads of .grad (noted as ever)
STEPPED = SETUP + GRAD + "loss.backward()\n" + f"""
opt = torch.optim.Adam([w], lr=1e-3, foreach=False)
for _ in range({STEPS}):
    opt.step()
w.grad = None
""" + GRAD + "loss.backward()\n"


def test_an_optimizer_s_own_arithmetic_counts_toward_the_operation_bound(trace_source,
                                                                       monkeypatch):
    """Between two passes, 15 Adam steps: their reads of .grad alone (about 5 a step) stay under
    the bound, their arithmetic takes them past it. Each of the script's operations grows the
    profiler's record, an optimizer's too: the second pass says why it has no numbers."""
    from app.trace import forward_memory

    bound = MANY // 2
    assert 5 * STEPS + GRAD.count("\n") + 10 < bound < 13 * STEPS
    monkeypatch.setattr(forward_memory, "MAX_OPERATIONS", bound)
    doc = trace_fresh(trace_source, STEPPED)
    assert doc["error"] is None, doc["error"]
    first, second = [e for e in doc["events"] if e["kind"] == "backward"]
    assert "peak_bytes" in first["forward_memory"]
    assert list(second["forward_memory"]) == ["unmeasured"]
    assert f"more than {bound} torch operations" in second["forward_memory"]["unmeasured"]


BROKEN_WALK = SETUP + """
from torch import nn


class Hidden(nn.Module):
    def modules(self):  # the tracer's naming walks every model the script holds: not this one
        raise RuntimeError("not today")


m = Hidden()
""" + GRAD + "loss.backward()\ndel m, h, loss\nw.grad = None\n" + GRAD + "loss.backward()\n"


def test_a_pass_the_tracer_could_not_walk_does_not_end_the_measuring(trace_source):
    """The first backward cannot be recorded (naming the script's models raised): it runs
    plainly, unrecorded, and the next pass's forward is still looked for and measured from
    its own first operation."""
    doc = trace_fresh(trace_source, BROKEN_WALK)
    assert doc["error"] is None, doc["error"]
    passes = [e for e in doc["events"] if e["kind"] == "backward"]
    assert len(passes) == 1  # the second: the first had no event
    lines = BROKEN_WALK.splitlines()
    second_forward = len(lines) - lines[::-1].index("h = w * 1.0")
    memory = passes[0]["forward_memory"]
    assert memory["line"] == second_forward
    peak, held = plain_profile(SETUP, GRAD)
    assert abs(memory["peak_bytes"] - peak) < SLACK and abs(memory["held_bytes"] - held) < SLACK


def test_cudas_peak_is_never_below_zero_or_below_what_is_held():
    """torch.cuda.reset_peak_memory_stats() mid-forward, after the script freed, leaves the
    peak counter below the forward start's total: the peak above that start is still at least
    0 (the start was itself held) and at least what is held at the end."""
    import jsonschema_rs

    from app.format.schema import load_schema
    from app.trace.forward_memory import _above

    start, freed_to, then_made = 1000, 200, 300  # bytes, as a script might: free, reset, make
    most, now = freed_to + then_made, freed_to + then_made
    peak, held = _above(most, now, start)
    assert held == now - start == -500
    assert peak == 0 and peak >= held
    assert _above(start + 800, start + 300, start) == (800, 300)  # no reset: as read

    def find(node):
        if isinstance(node, dict):
            if "forward_memory" in node and "oneOf" in node["forward_memory"]:
                return node["forward_memory"]
            return next((f for v in node.values() if (f := find(v)) is not None), None)
        if isinstance(node, list):
            return next((f for v in node if (f := find(v)) is not None), None)
        return None
    schema = find(load_schema())
    entry = {"device": "cuda", "peak_bytes": peak, "held_bytes": held, "line": 3}
    assert jsonschema_rs.validator_for(schema).is_valid(entry)
    assert not jsonschema_rs.validator_for(schema).is_valid({**entry, "peak_bytes": -500})


def test_a_forward_that_begins_with_a_list_of_tensors_starts_there(trace_source):
    """torch.cat takes its tensors in a list: its output (2 MB here, by hand) is the forward's
    first node, and counts in the peak."""
    doc = trace_fresh(trace_source, SETUP + "h = torch.cat([w, w])\nloss = h.sin().sum()\n"
                      "loss.backward()\n")
    memory = first_pass(doc)
    assert memory["line"] == SETUP.count("\n") + 1
    # cat's output (saved by sin) and sin's own (freed once summed: its peak only)
    assert 2 * SIZE <= memory["held_bytes"] < 2 * SIZE + SLACK
    assert 4 * SIZE <= memory["peak_bytes"] < 4 * SIZE + SLACK


WIDE = 64  # features: small tensors, beside cuBLAS's tens of MB


def linear_setup(width: int) -> str:
    return ("import torch\ntorch.manual_seed(0)\n"
            f"x = torch.randn(256, {width}, device='cuda')\n"
            f"weight = torch.randn({width}, {width}, device='cuda', requires_grad=True)\n"
            f"bias = torch.zeros({width}, device='cuda', requires_grad=True)\n")


LINEAR_FORWARD = """
h = torch.nn.functional.linear(x, weight, bias)
loss = h.relu().sum()
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_a_first_matrix_product_counts_only_its_own_tensors(tmp_path):
    """cuBLAS's workspace, taken at a process's first matrix product (tens of MB on an H100),
    is made before the script: the traced forward's numbers equal a plain forward's measured
    in a process whose workspace already exists, and stay far below the workspace's size."""
    setup = linear_setup(WIDE)
    script = tmp_path / "first_product.py"
    script.write_text(setup + LINEAR_FORWARD + "loss.backward()\n")
    # a process of its own, as a run has: its first matrix product is the script's
    done = subprocess.run([sys.executable, "-m", "app.cli", "trace", str(script), "--device",
                           "cuda", "-o", str(tmp_path / "t.json")], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    memory = first_pass(json.loads((tmp_path / "t.json").read_text()))
    namespace: dict = {"__name__": "__main__"}
    exec(compile(setup, "<setup>", "exec"), namespace)  # noqa: S102
    exec(compile(LINEAR_FORWARD, "<warm>", "exec"), namespace)  # noqa: S102 - the workspace
    del namespace["h"], namespace["loss"]
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    exec(compile(LINEAR_FORWARD, "<forward>", "exec"), namespace)  # noqa: S102
    peak, held = torch.cuda.max_memory_allocated() - start, torch.cuda.memory_allocated() - start
    assert memory["device"] == "cuda"
    assert abs(memory["peak_bytes"] - peak) < SLACK and abs(memory["held_bytes"] - held) < SLACK
    assert peak < 4 * 256 * WIDE * 4  # h, its relu, the sum: a few 64 kB tensors, not 30 MB


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_a_wider_matrix_product_runs_in_the_sandbox(tmp_path):
    """On an H100 (torch 2.11, 2026-11-26) the CLI's worker, given the machine's 16 threads,
    died of SIGSEGV in this 512-wide linear; given one, it ran (runner's `plain_threads`)."""
    script = tmp_path / "wide.py"
    script.write_text(linear_setup(512) + LINEAR_FORWARD + "loss.backward()\n"
                      "print(round(weight.grad.norm().item(), 2))\n")
    done = subprocess.run([sys.executable, "-m", "app.cli", "trace", str(script), "--device",
                           "cuda", "-o", str(tmp_path / "t.json")], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=300, check=True)
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["stdout"] == plain.stdout  # the same seed: the same grad's norm
