"""The sandbox takes nothing an ordinary script needs: SciPy inside a custom Function (SciPy
submodules load lazily, after Landlock closed), DataLoader worker processes (fork and POSIX
shared memory in a private /dev/shm), files in the run folder, deprecated spellings."""

from __future__ import annotations

import pytest

from app.runner import trace_in_sandbox

from .conftest import leftovers

SCRIPTS = {
    "scipy-custom-function": ("""\
import numpy as np
import torch
from scipy import linalg, optimize, special


class Erf(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.as_tensor(special.erf(x.detach().numpy()))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 / np.sqrt(np.pi) * torch.exp(-x * x)


x = torch.randn(5, dtype=torch.double, requires_grad=True)
Erf.apply(x).sum().backward()
found = optimize.minimize(lambda v: (v**2).sum(), [1.0])
print(round(float(linalg.det(np.eye(2))), 3), found.success)
""", 1, "1.0 True"),
    "dataloader-with-worker-processes": ("""\
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(20, 3), torch.randn(20, 1))
for xb, yb in DataLoader(data, batch_size=10, num_workers=2):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(xb), yb).backward()
    opt.step()
print("batches done")
""", 2, "batches done"),
    "files-variable-and-checkpoint": ("""\
import torch
from torch.autograd import Variable

w = Variable(torch.ones(2), requires_grad=True)
torch.save({"w": w.detach()}, "checkpoint.pt")
with open("notes.txt", "w") as f:
    f.write("hello")
loaded = torch.load("checkpoint.pt")["w"]
(w * loaded).sum().backward()
print(open("notes.txt").read(), w.grad.tolist())
""", 1, "hello [1.0, 1.0]"),
    # the run's whole budget (the tests' 512 MiB) is the script's: the room the worker keeps
    # back for its report is mapped before the limit is set (a reviewer found 96 MiB taken)
    "most-of-its-memory": ("""\
import torch
block = torch.ones(440 * 2**20, dtype=torch.uint8)
w = torch.ones(2, requires_grad=True)
(w * float(block[-1])).sum().backward()
print(block.numel() == 440 * 2**20, bool(block[-1] == 1), w.grad.tolist())
""", 1, "True True [1.0, 1.0]"),
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_ordinary_script_traces_in_the_sandbox(name, pool):
    source, backward_events, printed = SCRIPTS[name]
    doc = trace_in_sandbox(pool=pool, source=source, name=f"{name}.py", timeout=60, wait=90)
    assert doc["error"] is None, doc["error"]
    assert sum(e["kind"] == "backward" for e in doc["events"]) == backward_events
    assert printed in doc["stdout"]
    assert doc["sandbox"]["landlock"]["enforced"] is True or \
        doc["sandbox"]["landlock"]["reason"]
    assert leftovers(doc) == []
