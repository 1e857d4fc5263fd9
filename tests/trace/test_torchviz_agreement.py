"""The walker sees the same graph torchviz does: same nodes, same edges, on real models.

torchviz names each grad_fn node by `str(id(fn))`; the walk keeps every grad_fn alive, so the two
walks can be compared edge by edge, not just counted.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
import torch
from torch import nn

torchviz = pytest.importorskip("torchviz")

from app.trace.graph import walk  # noqa: E402


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, (g * x).sum(0)


def reused_linear():
    torch.manual_seed(0)
    lin, head = nn.Linear(4, 4), nn.Linear(4, 1)
    h = torch.randn(3, 4)
    for _ in range(3):
        h = torch.relu(lin(h))
    return head(h).sum()


def lstm():
    torch.manual_seed(0)
    rnn = nn.LSTM(3, 5, num_layers=2)
    out, (h, c) = rnn(torch.randn(4, 2, 3))
    return out.sum() + h.sum()


def small_cnn():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(4 * 3 * 3, 2))
    return net(torch.randn(2, 1, 8, 8)).logsumexp(1).mean()


def transformer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    enc.train()
    return enc(torch.randn(5, 2, 8)).pow(2).mean()


def custom_function():
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, requires_grad=True)
    return _Scale.apply(x.tanh(), w).sum()


def view_and_inplace():
    torch.manual_seed(0)
    x = torch.randn(4, 6, requires_grad=True)
    y = x * 2
    v = y.view(6, 4)[1:3]  # a view of a non-leaf
    v.mul_(3)  # in place on the view: autograd rewrites the base's history
    y.add_(1)
    return y.t().reshape(-1)[::2].sum()


MODELS = [reused_linear, lstm, small_cnn, transformer, custom_function, view_and_inplace]


def torchviz_walk(root: torch.Tensor) -> tuple[Counter, Counter]:
    """(grad_fn node id -> name, edge multiset) from torchviz's DOT source."""
    dot = torchviz.make_dot(root)
    labels, edges = {}, Counter()
    for line in dot.body:
        edge = re.match(r"\s*(\d+) -> (\d+)", line)
        if edge:
            edges[edge.groups()] += 1
            continue
        node = re.match(r"\s*(\d+) \[label=(.*?)(?: fillcolor=.*)?\]$", line)
        if node:
            labels[node.group(1)] = node.group(2).strip('"')
    # tensors (variables, the root, view bases) are labelled "name\n size"; grad_fns are not
    fn_ids = {i for i, label in labels.items() if "\n" not in label and "(" not in label}
    names = Counter(labels[i] for i in fn_ids)
    fn_edges = Counter({e: n for e, n in edges.items() if e[0] in fn_ids and e[1] in fn_ids})
    return names, fn_edges


@pytest.mark.parametrize("model", MODELS, ids=lambda f: f.__name__)
def test_walk_matches_torchviz(model):
    root = model()
    w = walk([(root, "loss")], script_path="<none>", name_leaf=lambda t: ("x", "leaf"))
    ours_names = Counter(n["name"] for n in w.nodes if n["kind"] != "output")
    ours_edges = Counter(
        (str(id(w.fns[e["source"]])), str(id(w.fns[e["target"]])))
        for e in w.edges if e["target"] in w.fns)
    tv_names, tv_edges = torchviz_walk(root)
    assert ours_names == tv_names
    assert sum(ours_edges.values()) == sum(tv_edges.values())
    assert ours_edges == tv_edges
    assert sum(ours_names.values()) >= 5  # a real graph, not an empty agreement


def test_custom_function_and_inplace_graphs_have_their_special_nodes():
    names = {n["name"] for n in walk([(custom_function(), "y")], script_path="",
                                     name_leaf=lambda t: ("x", "leaf")).nodes}
    assert "_ScaleBackward" in names
    names = {n["name"] for n in walk([(view_and_inplace(), "y")], script_path="",
                                     name_leaf=lambda t: ("x", "leaf")).nodes}
    assert any(name.startswith("CopySlices") for name in names)


def test_walk_of_100k_nodes_does_not_recurse():
    x = torch.ones(1, requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.0
    w = walk([(y, "y")], script_path="", name_leaf=lambda t: ("x", "leaf"))
    assert len(w.nodes) == 100_000 + 2  # the muls, x's AccumulateGrad, the output
    assert not w.truncated
