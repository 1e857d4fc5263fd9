"""compiled_backward: a compiled region is one CompiledFunctionBackward node, its `.grad` is
eager's, a graph break makes as many regions as dynamo made graphs, and what the forward saves
and the backward recomputes is what AOTAutograd's own partition of the same model says.

Each fact is PyTorch's own: the model compiled plainly here (aot_eager, or a backend of the
test's own that counts dynamo's graphs or keeps AOTAutograd's), never the Trace read back."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.debugging import boxed_nop
from torch._functorch.partitioners import min_cut_rematerialization_partition

from tests.scenarios.helpers import edges, line_of, nodes_named
from tests.trace.test_compile_graphs import expected, recorded
from tests.trace_facts import backward_events, contribution_sum, diagnostics, values

COMPILED = ("compiled", "graph_break")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def model_and_data(plain, graph_break: bool):
    """The scenario's model and data, made here as the script makes them (its eager variant
    run plainly gives the MLP class and the tensors to check against)."""
    ns = plain("compiled_backward", "--variant", "eager")
    torch.manual_seed(0)
    model = ns["MLP"](graph_break=graph_break)
    x, y = torch.randn(5, 4), torch.randn(5, 1)
    assert torch.equal(x, ns["x"]) and torch.equal(y, ns["y"])
    return model, x, y


def plain_grads(plain, variant: str) -> dict[str, torch.Tensor]:
    """`.grad` as PyTorch leaves it: eager, or compiled with aot_eager (the sandbox's backend)."""
    model, x, y = model_and_data(plain, variant == "graph_break")
    run = model if variant == "eager" else torch.compile(model, backend="aot_eager")
    F.mse_loss(run(x), y).backward()
    return {n: p.grad.double() for n, p in model.named_parameters()}


def dynamo_graphs(plain, graph_break: bool) -> int:
    """How many FX graphs dynamo hands a backend for one forward of the model."""
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    model, x, _ = model_and_data(plain, graph_break)
    torch.compile(model, backend=counting)(x)
    return len(graphs)


def aot_partition(plain, graph_break: bool) -> list[dict]:
    """AOTAutograd's own forward/backward graphs of each region (min-cut partition, as
    aot_eager), read by test_compile_graphs.expected, in the order the regions compiled."""
    forwards, backwards = [], []

    def fw(gm, example_inputs):
        forwards.append(gm)
        return boxed_nop(gm, example_inputs)

    def bw(gm, example_inputs):
        backwards.append(gm)
        return boxed_nop(gm, example_inputs)

    backend = aot_autograd(fw_compiler=fw, bw_compiler=bw,
                           partition_fn=min_cut_rematerialization_partition,
                           keep_inference_input_mutations=True)
    model, x, y = model_and_data(plain, graph_break)
    F.mse_loss(torch.compile(model, backend=backend)(x), y).backward()
    # the backward runs the last region first
    return [expected(f, b) for f, b in zip(forwards, backwards[::-1], strict=True)]


@pytest.mark.parametrize("variant", ["eager", *COMPILED])
def test_grad_is_eagers_and_the_per_use_sums_hold(traced, plain, variant):
    doc = traced("compiled_backward", "--variant", variant)
    assert doc["error"] is None, doc["error"]
    (event,) = backward_events(doc)
    eager = plain_grads(plain, "eager")
    torch._dynamo.reset()
    compiled = plain_grads(plain, variant)
    assert set(doc["params"]) == set(eager)
    for name, grad in eager.items():
        got = values(event["grads"][name]["after"])
        assert torch.allclose(got, grad, atol=1e-6), (variant, name)
        assert torch.allclose(got, compiled[name], atol=1e-6), (variant, name)
        assert torch.allclose(contribution_sum(event, name), got, atol=1e-6), (variant, name)


def test_eager_has_a_node_per_op_and_compiled_one_per_region(traced, plain):
    (eager,) = backward_events(traced("compiled_backward", "--variant", "eager"))
    for name in ("AddmmBackward0", "ReluBackward0", "TBackward0"):
        assert nodes_named(eager, name), name
    assert not nodes_named(eager, "CompiledFunctionBackward")
    for variant in COMPILED:
        doc = traced("compiled_backward", "--variant", variant)
        (event,) = backward_events(doc)
        nodes = nodes_named(event, "CompiledFunctionBackward")
        torch._dynamo.reset()
        graphs = dynamo_graphs(plain, variant == "graph_break")
        assert graphs == (2 if variant == "graph_break" else 1)
        assert len(nodes) == len(doc["compiled_regions"]) == graphs, variant
        for name in ("AddmmBackward0", "ReluBackward0", "TBackward0"):
            assert not nodes_named(event, name), (variant, name)
    first, second = nodes  # graph_break's: the second region's node feeds the first's
    assert edges(event, source=first["id"], target=second["id"]) or \
        edges(event, source=second["id"], target=first["id"])


def test_the_graph_break_is_the_print(plain):
    model, x, _ = model_and_data(plain, graph_break=True)
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 1
    (reason,) = explained.break_reasons
    assert "print" in str(reason.reason)
    torch._dynamo.reset()
    model, x, _ = model_and_data(plain, graph_break=False)
    assert torch._dynamo.explain(model)(x).graph_break_count == 0


@pytest.mark.parametrize("variant", COMPILED)
def test_saved_and_recomputed_are_aotautograds_partition(traced, plain, variant):
    mine = aot_partition(plain, variant == "graph_break")
    doc = traced("compiled_backward", "--variant", variant)
    assert [recorded(r) for r in doc["compiled_regions"]] == mine
    if variant == "compiled":
        # what the narration says: x, fc2's weight and the ReLU's output are saved, and fc2's
        # weight transpose is recomputed from the saved weight rather than saved
        (region,) = mine
        assert region["saved"] == Counter({("input", (5, 4)): 1, ("input", (1, 8)): 1,
                                           ("aten.relu.default", (5, 8)): 1})
        assert region["recomputed"] == Counter({"aten.t.default": 1})
    else:
        first, second = mine
        assert "aten.relu.default" in first["fw_ops"]
        assert "aten.relu.default" not in second["fw_ops"]


def test_the_page_says_it_compiled_with_aot_eager(traced):
    assert not diagnostics(traced("compiled_backward", "--variant", "eager"),
                           "compiled_with_aot_eager")
    for variant in COMPILED:
        (said,) = diagnostics(traced("compiled_backward", "--variant", variant),
                              "compiled_with_aot_eager")
        line = line_of("compiled_backward", "else torch.compile(model)")
        assert f"line {line} " in said["message"]
