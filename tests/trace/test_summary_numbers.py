"""The numbers a Trace carries, checked against torch in float64 (summary.py): values written
short enough to keep a big model's report small, and every float32 given back exactly; edge
norms taken in float32 where that is exact enough, and still right far from 1."""

from __future__ import annotations

import json
import math

import pytest
import torch

from app.trace.summary import EdgeNorms, norm_of, summarize


@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e-12, 1e-30, 1e-40, 1e8, 1e30])
def test_float32_values_come_back_exactly_from_their_json(scale):
    torch.manual_seed(0)
    t = (torch.randn(3000, dtype=torch.float64) * scale).float()
    text = json.dumps(summarize(t)["values"])
    back = torch.tensor(json.loads(text), dtype=torch.float64).float()
    assert torch.equal(back, t)  # 9 significant digits give every float32 back


def test_float32_values_are_written_in_at_most_nine_significant_digits():
    torch.manual_seed(1)
    t = torch.randn(2000)
    for number in json.dumps(summarize(t)["values"])[1:-1].split(","):
        mantissa = number.strip().lstrip("-").split("e")[0].replace(".", "").lstrip("0")
        assert len(mantissa) <= 9, number
    # and the text is far shorter than the 17 digits a float64 copy takes
    full = json.dumps(t.double().tolist())
    assert len(json.dumps(summarize(t)["values"])) < 0.75 * len(full)


def test_float64_values_keep_every_digit():
    t = torch.tensor([1 / 3, math.pi, 1e-300], dtype=torch.float64)
    assert summarize(t)["values"] == t.tolist()


def test_zeros_infinities_and_nan_stay_what_they_are():
    t = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.5])
    assert summarize(t)["values"] == [0.0, -0.0, "Infinity", "-Infinity", "NaN", 1.5]


@pytest.mark.parametrize("scale", [1.0, 1e-6, 1e-25, 1e-40, 1e25])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_edge_norms_agree_with_torch_in_float64(scale, dtype):
    torch.manual_seed(2)
    t = (torch.randn(64, 33, dtype=torch.float64) * scale).to(dtype)
    expected = float(t.double().norm())
    got = norm_of(t)
    if expected == 0:  # the scale underflowed the dtype itself: nothing left to measure
        assert got == 0
    elif math.isinf(expected):  # or overflowed it (float16 at 1e25)
        assert got == "Infinity"
    else:  # float32's squares underflow at 1e-25 and overflow at 1e25: those are not lost
        assert got == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("make", [lambda: torch.full((16_000_000,), 0.1),
                                  lambda: torch.randn(4_000_003)])
def test_a_large_tensor_s_norm_agrees_with_float64(make):
    # float32's own sum of 16M squares drifts by 0.9% (a reviewer's measure): long tensors
    # are summed in chunks, whose norms are added in float64
    t = make()
    assert norm_of(t) == pytest.approx(float(t.double().norm()), rel=1e-6)


@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e-9, 1e-12, 1e9, 1e12])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_pass_s_edge_norms_taken_together_agree_with_torch_and_with_one_at_a_time(scale, dtype):
    """EdgeNorms (a pass's edges, finished together) against torch's float64 norm, and the
    very number norm_of gives each edge alone: shapes of whole chunks, a tail, a few values,
    NaN and infinity, mixed in one pass."""
    torch.manual_seed(2)
    shapes = [(16, 32, 128), (64, 1024), (3, 1024), (2048,), (1025,), (10,), (4096, 2)]
    tensors = [(torch.randn(s, dtype=torch.float64) * scale).to(dtype) for s in shapes]
    odd = torch.randn(2048).to(dtype)
    odd[5] = math.inf
    tensors += [odd, torch.full((2048,), math.nan).to(dtype), torch.zeros(4096).to(dtype)]
    norms, entries = EdgeNorms(), []
    for t in tensors:
        entries.append({})
        norms.norm_into(entries[-1], t)
    norms.finish()
    for t, entry in zip(tensors, entries, strict=True):
        assert entry["grad_norm"] == norm_of(t)
        exact = float(torch.linalg.vector_norm(t.double()))
        if math.isnan(exact):
            assert entry["grad_norm"] == "NaN"
        elif math.isinf(exact):
            assert entry["grad_norm"] == "Infinity"
        else:
            assert entry["grad_norm"] == pytest.approx(exact, rel=1e-5, abs=1e-30)
