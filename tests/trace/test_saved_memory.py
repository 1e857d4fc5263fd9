"""The memory a pass held for backward (app/trace/saved_memory.py), against PyTorch's own
account: the same model run plainly under `torch.autograd.graph.saved_tensors_hooks`, whose
pack hook is handed every tensor autograd saves. Each allocation (storage) once; a
parameter's apart; per module, the allocations saved while that module's forward ran."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

MLP = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
x = torch.randn(5, 8)
model(x).pow(2).mean().backward()
"""

BLOCK = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.1,
                                   batch_first=True)
x = torch.randn(2, 5, 16)
model(x).pow(2).mean().backward()
"""


def pytorch_account(code: str) -> dict:
    """Run the script's forward plainly with a pack hook counting each saved storage, and a
    stack of the modules whose forward is running (the innermost one is charged)."""
    namespace: dict = {"__name__": "__main__"}
    source = textwrap.dedent(code).replace("model(x).pow(2).mean().backward()", "")
    exec(compile(source, "<plain>", "exec"), namespace)  # noqa: S102 - the test's own script
    model: nn.Module = namespace["model"]
    # the Trace names the model's own forward by its class (a submodule by its path)
    names = {m: n or type(model).__name__ for n, m in model.named_modules()}
    running: list[str] = []
    def entered(module, args) -> None:
        running.append(names[module])

    def left(module, args, output) -> None:  # returns None: the output stays the module's
        running.pop()

    handles = [m.register_forward_pre_hook(entered) for m in model.modules()]
    handles += [m.register_forward_hook(left) for m in model.modules()]
    saved: dict[int, int] = {}
    per_module: dict[str, dict[int, int]] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        if running:
            per_module.setdefault(running[-1], {})[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(namespace["x"]).pow(2).mean()
    for handle in handles:
        handle.remove()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return {"held_bytes": sum(v for k, v in saved.items() if k not in params),
            "leaf_bytes": sum(v for k, v in saved.items() if k in params),
            "by_module": {m: sum(v for k, v in sizes.items() if k not in params)
                          for m, sizes in per_module.items()}}


@pytest.mark.parametrize("code", [MLP, BLOCK], ids=["mlp", "transformer-block"])
def test_the_memory_held_for_backward_is_what_the_pack_hook_saw(trace_source, code):
    expected = pytorch_account(code)
    doc = trace_source(code)
    [event] = [e for e in doc["events"] if e["kind"] == "backward"]
    memory = event["saved_memory"]
    assert memory["held_bytes"] == expected["held_bytes"] > 0
    assert memory["leaf_bytes"] == expected["leaf_bytes"] > 0
    # the module paths the Trace uses are named_modules()'s
    assert {m: b for m, b in memory["by_module"].items() if b} == \
        {m: b for m, b in expected["by_module"].items() if b}


def test_one_allocation_saved_by_two_nodes_is_counted_once(trace_source):
    doc = trace_source("""
        import torch
        w = torch.randn(1000, requires_grad=True)
        h = torch.tanh(w)                 # tanh saves its output h
        (h * h).sum().backward()          # mul saves h again, twice
        """)
    [event] = [e for e in doc["events"] if e["kind"] == "backward"]
    numbers = {s["storage"] for n in event["graph"]["nodes"] for s in n.get("saved", ())
               if "storage" in s}
    assert len(numbers) == 1  # h, three times: one allocation
    assert event["saved_memory"]["held_bytes"] == 1000 * 4
    assert event["saved_memory"]["leaf_bytes"] == 0


CHECKPOINTED = """
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
calls = []


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 16))

    def forward(self, x):
        calls.append(1)
        return self.inner(x)


torch.manual_seed(0)
block, head = Block(), nn.Linear(16, 1)
x = torch.randn(8, 16, requires_grad=True)
USE = checkpoint(block, x, use_reentrant=False) if CHECKPOINT else block(x)
loss = head(USE).pow(2).mean()
loss.backward()
print("forward calls:", len(calls))
"""


def plain_checkpoint_account(checkpointed: bool) -> tuple[int, int]:
    """(bytes an outer pack hook saw in the forward, not a parameter's; the block's forward
    calls) of the script run plainly. Inside a checkpoint its own hooks take the region's
    tensors: the outer hook sees what the graph keeps until the backward, which runs without
    it (the checkpoint's recomputation saves for itself, not for the graph)."""
    namespace: dict = {"__name__": "__main__", "CHECKPOINT": checkpointed}
    forward, backward = textwrap.dedent(CHECKPOINTED).split("loss.backward()")
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        exec(compile(forward, "<plain>", "exec"), namespace)  # noqa: S102 - the test's own
    exec(compile("loss.backward()" + backward, "<plain>", "exec"), namespace)  # noqa: S102
    # kept anyway: the parameters and x, a leaf of the script's (the checkpoint saves it)
    params = {p.untyped_storage().data_ptr()
              for m in (namespace["block"], namespace["head"]) for p in m.parameters()}
    params.add(namespace["x"].untyped_storage().data_ptr())
    return sum(v for k, v in kept.items() if k not in params), len(namespace["calls"])


def test_a_checkpointed_region_is_not_read_and_its_saving_is_pytorchs(trace_source):
    plain_with, calls_with = plain_checkpoint_account(True)
    plain_without, calls_without = plain_checkpoint_account(False)
    assert (calls_with, calls_without) == (2, 1)  # the checkpoint recomputes once in backward
    traced = {flag: trace_source(f"CHECKPOINT = {flag}\n" + textwrap.dedent(CHECKPOINTED))
              for flag in (True, False)}
    # reading the region's saved tensors would run its forward again: the script's own count
    # of forward calls is what it is without autograd-lab
    assert traced[True]["stdout"].strip() == f"forward calls: {calls_with}"
    assert traced[False]["stdout"].strip() == f"forward calls: {calls_without}"
    memory = {flag: next(e for e in doc["events"] if e["kind"] == "backward")["saved_memory"]
              for flag, doc in traced.items()}
    assert memory[True]["held_bytes"] == plain_with
    assert memory[False]["held_bytes"] == plain_without
    saving = memory[False]["held_bytes"] - memory[True]["held_bytes"]
    assert saving == plain_without - plain_with > 0
    assert memory[True]["packed_tensors"] > 0 and "packed_tensors" not in memory[False]
