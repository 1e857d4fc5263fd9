"""Mixed precision as PyTorch does it: autocast's casts carry gradients in another dtype along
their edges, and a GradScaler's scale and skipped steps are said. Each fact is read from a plain
run of the same script (hooks on its own nodes, the scaler's get_scale(), the weights)."""

from __future__ import annotations

import textwrap

import torch

from tests.trace_facts import drawn_dtypes, gradients_by_node

AUTOCAST = """
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x, y = torch.randn(5, 4), torch.randn(5, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
        loss = nn.functional.mse_loss(out.float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
"""

# a scale so large that the scaled gradients overflow float32: the step is skipped, twice, and
# each update halves the scale
OVERFLOW = """
    import torch
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(3))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 127)
    for _ in range(2):
        opt.zero_grad()
        scaler.scale((w * 1e10).sum()).backward()
        scaler.step(opt)
        scaler.update()
"""


def _plain(code: str) -> dict:
    ns: dict = {}
    exec(compile(textwrap.dedent(code), "<plain>", "exec", dont_inherit=True), ns)
    return ns


def test_each_edge_carries_the_dtype_of_the_gradient_pytorch_passed(trace_source):
    # PyTorch's own: every node's gradients for its inputs, by (node, slot), from hooks on a
    # plain run's nodes
    code = textwrap.dedent(AUTOCAST)
    body, _ = code.split("scaler.scale(loss).backward()")
    ns: dict = {}
    exec(compile(body, "<plain>", "exec", dont_inherit=True), ns)
    seen = gradients_by_node(ns["scaler"].scale(ns["loss"]))

    doc = trace_source(AUTOCAST)
    drawn = drawn_dtypes(doc["events"][0])
    assert drawn == seen
    assert ("ToCopyBackward0", 0, "bfloat16") in drawn  # autocast's casts are there


def test_a_step_a_grad_scaler_ran_says_its_scale_and_used_the_unscaled_gradient(trace_source):
    plain = _plain(AUTOCAST)
    doc = trace_source(AUTOCAST)
    (step,) = [e for e in doc["events"] if e["kind"] == "step"]
    # the scale scaler.step divided by: the one the scaler had then (update() keeps it: the
    # growth interval is 2000 good steps)
    assert step["scaler"] == {"scale": plain["scaler"].get_scale()} == {"scale": 1024.0}
    # the .grad the step used is the unscaled one PyTorch left (the scaler unscales in place)
    recorded = torch.tensor(step["params"]["2.bias"]["grad"]["values"])
    assert torch.allclose(recorded, plain["model"][2].bias.grad)
    assert not any(d["code"] == "grad_scaler_skipped_step" for d in doc["diagnostics"])


def test_a_skipped_step_is_said_with_the_scales_pytorch_used(trace_source):
    plain = _plain(OVERFLOW)
    # PyTorch skipped both steps: the weight never moved, and each update halved the scale
    torch.manual_seed(0)
    assert torch.equal(plain["w"].detach(), torch.randn(3))
    assert plain["scaler"].get_scale() == 2.0 ** 125
    doc = trace_source(OVERFLOW)
    assert [e["kind"] for e in doc["events"]] == ["backward", "backward"]  # no step event
    skipped = [d["message"] for d in doc["diagnostics"] if d["code"] == "grad_scaler_skipped_step"]
    assert len(skipped) == 2
    for said, scale, after in zip(skipped, (2.0 ** 127, 2.0 ** 126), (2.0 ** 126, 2.0 ** 125),
                                  strict=True):
        assert f"at line 10 skipped optimizer.step(): the gradients, scaled by {scale:g}" in said
        assert f"set the scale to {after:g}" in said


# PyTorch's AMP recipe for clipping: unscale_ first, clip, then scaler.step (which then does not
# divide again)
UNSCALED_FIRST = """
    import torch
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for clip in (False, True):
        opt.zero_grad()
        scaler.scale((w * torch.tensor([3.0, 40.0])).sum()).backward()
        if clip:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_([w], max_norm=1.0)
        scaler.step(opt)
        scaler.update()
"""


def test_a_step_after_the_scripts_own_unscale_is_marked_unscaled_first(trace_source):
    # plain PyTorch: after unscale_, scaler.step leaves .grad as it finds it (no second division)
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    scaler.scale((w * torch.tensor([3.0, 40.0])).sum()).backward()
    scaler.unscale_(opt)
    w.grad.mul_(0.5)  # what the script does between unscale_ and step
    scaler.step(opt)
    assert w.grad.tolist() == [1.5, 20.0]
    assert torch.allclose(w.detach(), torch.tensor([1.0, -2.0]) - 0.1 * w.grad)

    doc = trace_source(UNSCALED_FIRST)
    first, second = [e for e in doc["events"] if e["kind"] == "step"]
    assert first["scaler"] == {"scale": 1024.0}  # scaler.step divided
    assert second["scaler"] == {"scale": 1024.0, "unscaled_first": True}
