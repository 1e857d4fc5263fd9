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
