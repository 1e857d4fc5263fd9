"""checkpointing: what torch.utils.checkpoint no longer keeps for backward, the forward it runs
again during backward, and the same `.grad`, each against PyTorch run plainly.

PyTorch's own account of the memory a forward leaves for backward: the scenario's model run
again, plainly, under an outer `torch.autograd.graph.saved_tensors_hooks` whose pack hook is
handed every tensor autograd saves (each storage counted once, by its address; a parameter's
storage apart, since it is kept anyway). Inside a non-reentrant checkpoint the checkpoint's own
hooks take the region's tensors, so the outer hook sees only what the graph keeps until the
backward: the tensors outside the region, and the region's inputs, which the checkpoint saves.
"""

from __future__ import annotations

import pytest
import torch

from tests.scenarios.helpers import nodes_named
from tests.trace_facts import backward_events, values

VARIANTS = ("without", "with", "reentrant")
CHECKPOINTED = ("blocks.1", "blocks.2")


def in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


def pytorch_account(plain, variant: str) -> dict:
    """The scenario's model run once more, plainly: the bytes an outer pack hook saw saved in
    the forward, the module forwards run during backward, and `.grad`."""
    ns = plain("checkpointing", "--variant", variant)
    model, x, y = ns["model"], ns["x"], ns["y"]
    model.zero_grad()
    names = {m: n for n, m in model.named_modules() if n}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = (model(x) - y).pow(2).mean()
    rerun: list[str] = []
    handles = [m.register_forward_pre_hook(
        lambda m, args: rerun.append(names[m]) if in_backward() else None)
        for m in names]
    loss.backward()
    for handle in handles:
        handle.remove()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return {"held": sum(v for k, v in saved.items() if k not in params),
            "rerun": rerun,
            "grads": {n: p.grad.clone() for n, p in model.named_parameters()},
            "script_grads": {n: p.grad for n, p in ns["model"].named_parameters()}}


@pytest.fixture(scope="module")
def accounts(plain):
    return {v: pytorch_account(plain, v) for v in VARIANTS}


def test_grad_is_the_same_with_and_without_checkpointing(traced, accounts):
    plain_grads = accounts["without"]["grads"]
    for variant in VARIANTS:
        for name, grad in accounts[variant]["grads"].items():
            # the same ops on the same values: equal to float rounding (here, bit for bit)
            assert torch.allclose(grad, plain_grads[name], rtol=1e-6, atol=0), (variant, name)
        [event] = backward_events(traced("checkpointing", "--variant", variant))
        for name, grad in plain_grads.items():
            recorded = values(event["grads"][name]["after"])
            assert torch.allclose(recorded, grad.double(), rtol=1e-5, atol=1e-9), (variant, name)


def test_the_saving_is_the_difference_pytorch_reports(traced, accounts):
    held = {v: backward_events(traced("checkpointing", "--variant", v))[0]["saved_memory"]
            ["held_bytes"] for v in VARIANTS}
    for variant in VARIANTS:
        assert held[variant] == accounts[variant]["held"], variant
    saving = held["without"] - held["with"]
    assert saving == accounts["without"]["held"] - accounts["with"]["held"] > 0
    # two checkpoints side by side each keep their input, reentrant or not
    assert held["reentrant"] == held["with"]


def test_nodes_in_a_region_are_marked_and_hold_nothing_but_the_region_s_inputs(traced, plain):
    [event] = backward_events(traced("checkpointing", "--variant", "with"))
    regions = event["graph"]["checkpoints"]
    assert len(regions) == len(CHECKPOINTED)
    for node in event["graph"]["nodes"]:
        inside = (node.get("module") or "").startswith(CHECKPOINTED)
        tensors = [s for s in node.get("saved", ()) if "shape" in s or s.get("packed")]
        if tensors:  # every node that saved a tensor (a weight's TBackward0 saves none)
            assert ("checkpoint" in node) == inside, node
        if "checkpoint" in node:
            assert tensors and all(s.get("packed") and "bytes" not in s for s in tensors)
    # each region keeps one tensor: the input its block was called with, in plain PyTorch
    ns = plain("checkpointing", "--variant", "with")
    inputs = {}
    handles = [ns["model"].blocks[i].register_forward_pre_hook(
        lambda m, args, i=i: inputs.setdefault(f"blocks.{i}", args[0])) for i in (1, 2)]
    ns["model"](ns["x"])
    for handle in handles:
        handle.remove()
    modules = {n["checkpoint"]: n["module"].split(".")[:2] for n in event["graph"]["nodes"]
               if "checkpoint" in n}
    for index, region in enumerate(regions):
        [kept] = region["inputs"]
        block = ".".join(modules[index])
        assert kept["shape"] == list(inputs[block].shape)
        assert kept["bytes"] == inputs[block].untyped_storage().nbytes()


@pytest.mark.parametrize("variant", ["with", "reentrant"])
def test_the_forward_run_again_in_backward_is_marked_as_recomputation(traced, accounts,
                                                                      variant):
    [event] = backward_events(traced("checkpointing", "--variant", variant))
    rerun = accounts[variant]["rerun"]
    assert rerun and {m.split(".")[0] + "." + m.split(".")[1] for m in rerun} == \
        set(CHECKPOINTED)
    assert [r["module"] for r in event["recomputed"]] == rerun
    nodes = {n["id"]: n for n in event["graph"]["nodes"]}
    for entry in event["recomputed"]:
        if variant == "with":  # the region whose nodes that module made
            made = {n["module"] for n in nodes.values()
                    if n.get("checkpoint") == entry["checkpoint"]}
            assert entry["module"] in made or any(m.startswith(entry["module"] + ".")
                                                 for m in made)
        else:
            assert nodes[entry["node"]]["name"] == "CheckpointFunctionBackward"
    assert "recomputed" not in backward_events(traced("checkpointing", "--variant",
                                                      "without"))[0]
    # reentrant: one node per region, saving the region's input only
    if variant == "reentrant":  # each runs a backward of its own inside the pass
        assert len(nodes_named(event, "CheckpointFunctionBackward")) == len(CHECKPOINTED)
        assert event["nested"] == len(CHECKPOINTED)


def test_the_script_counts_its_forwards_as_plain_pytorch_does(traced, plain):
    """The Trace never reads a region's saved tensors (that would run its forward again)."""
    counts = {}
    for variant in VARIANTS:
        ns = plain("checkpointing", "--variant", variant)  # a fresh run of the script
        counts[variant] = sum(b.forwards for b in ns["model"].blocks)
        doc = traced("checkpointing", "--variant", variant)
        assert f"block forwards after backward: {counts[variant]}\n" in doc["stdout"]
    assert counts["with"] == counts["reentrant"] > counts["without"]


def test_the_forwards_peak_goes_down_as_torchs_profiler_reads_it(plain):
    """The lesson's claim: the allocator's peak during the forward is lower with checkpointing.
    Each variant traced afresh (an earlier trace's garbage collected first, so that no
    collection frees it mid-forward), against the same forward run plainly under
    torch.profiler (tests/trace/test_forward_memory.py reads its events another way)."""
    import gc
    import textwrap

    from app.trace.tracer import trace_script
    from tests.conftest import SCENARIOS
    from tests.trace.test_forward_memory import SLACK

    peaks = {}
    for variant in VARIANTS:
        gc.collect()
        doc = trace_script(SCENARIOS / "checkpointing.py", argv=["--variant", variant])
        memory = backward_events(doc)[0]["forward_memory"]
        ns = plain("checkpointing", "--variant", variant)
        gc.collect()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    profile_memory=True) as prof:
            exec(compile(textwrap.dedent("loss = (model(x) - y).pow(2).mean()"), "<forward>",
                         "exec"), ns)  # noqa: S102 - the scenario's own line, again
        total = peak = 0
        for event in sorted(prof.events(), key=lambda e: e.time_range.start):
            total += event.self_cpu_memory_usage
            peak = max(peak, total)
        assert memory["device"] == "cpu"
        assert abs(memory["peak_bytes"] - peak) < SLACK, variant
        peaks[variant] = memory["peak_bytes"]
    assert peaks["with"] < peaks["without"] and peaks["reentrant"] < peaks["without"]
