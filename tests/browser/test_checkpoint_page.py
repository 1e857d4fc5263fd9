"""The checkpointing scenario's page says what the checkpoint no longer keeps, what it keeps,
and which forwards ran again during backward (static/js/checkpoints.js), each number and name
against the scenario run plainly with PyTorch (the account of tests/scenarios/
test_checkpointing.py: an outer saved_tensors_hooks pack hook, a forward pre-hook during
backward)."""

from __future__ import annotations

import contextlib
import io
import runpy
import sys

import pytest
import torch

from tests.conftest import SCENARIOS
from tests.scenarios.test_checkpointing import pytorch_account

from .conftest import api_trace, open_scenario

pytestmark = pytest.mark.browser


def plain(name: str, *argv: str) -> dict:
    """The scenario run as `python scenarios/NAME.py ARGV` would run it, its globals back."""
    path = SCENARIOS / f"{name}.py"
    saved = list(sys.argv)
    sys.argv[:] = [str(path), *argv]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv[:] = saved


def region_inputs(variant: str) -> dict[str, torch.Tensor]:
    """The tensor each checkpointed block was called with, in a plain run."""
    ns = plain("checkpointing", "--variant", variant)
    seen: dict[str, torch.Tensor] = {}
    handles = [ns["model"].blocks[i].register_forward_pre_hook(
        lambda m, args, i=i: seen.setdefault(f"blocks.{i}", args[0])) for i in ns["CHECKPOINTED"]]
    ns["model"](ns["x"])
    for handle in handles:
        handle.remove()
    return seen


def test_a_checkpointed_region_says_what_it_keeps_and_what_ran_again(watched):
    page = watched.page
    account = pytorch_account(plain, "with")
    inputs = region_inputs("with")
    open_scenario(watched, "checkpointing", "variant=with")
    doc = api_trace(watched, "checkpointing", "variant=with")
    [event] = [e for e in doc["events"] if e["kind"] == "backward"]

    # the pass: held bytes as the pack hook counts them; the regions' inputs; what ran again
    page.wait_for_selector("#details .saved-memory")
    held = page.locator("#details .saved-memory p").first
    assert int(held.get_attribute("data-held")) == account["held"]
    assert "kept by its checkpoints" in held.inner_text()
    line = page.locator("#details .checkpoint-pass")
    assert int(line.get_attribute("data-regions")) == len(inputs)
    kept = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in inputs.values()}
    assert int(line.get_attribute("data-inputs")) == sum(kept.values())
    ran = line.locator(".recomputed-modules").inner_text()
    # each module once, in the order PyTorch ran it again
    assert [m.split(" (")[0] for m in ran.split(", ")] == list(dict.fromkeys(account["rerun"]))
    watched.shot("pass", full_page=False)

    # a node inside a region: the hook kept none of its saved tensors
    node = next(n for n in event["graph"]["nodes"]
                if n.get("checkpoint") is not None and n["name"] == "AddmmBackward0")
    block = ".".join(node["module"].split(".")[:2])
    page.click("#zoom-fit")
    page.click(f"#graph g.node#{node['id']}")
    note = page.locator("#details .checkpoint-note")
    note.wait_for()
    text = note.inner_text()
    packed = sum(bool(s.get("packed")) for s in node["saved"])
    assert f"took this node's {packed} saved tensors and kept none of them" in text
    assert "keeps only its 1 input" in text
    again = note.locator(".recomputed-modules").inner_text()
    assert [m.split(" (")[0] for m in again.split(", ")] == \
        [m for m in dict.fromkeys(account["rerun"]) if m == block or m.startswith(block + ".")]
    watched.shot("node", full_page=False)


def test_without_checkpointing_nothing_is_said_of_one(watched):
    page = watched.page
    account = pytorch_account(plain, "without")
    open_scenario(watched, "checkpointing", "variant=without")
    page.wait_for_selector("#details .saved-memory")
    held = page.locator("#details .saved-memory p").first
    assert int(held.get_attribute("data-held")) == account["held"]
    assert page.locator("#details .checkpoint-pass").count() == 0
    assert "checkpoint" not in held.inner_text()


def test_a_reentrant_checkpoint_s_node_says_it_ran_its_forward_again(watched):
    page = watched.page
    account = pytorch_account(plain, "reentrant")
    open_scenario(watched, "checkpointing", "variant=reentrant")
    doc = api_trace(watched, "checkpointing", "variant=reentrant")
    [event] = [e for e in doc["events"] if e["kind"] == "backward"]
    ids = [n["id"] for n in event["graph"]["nodes"] if n["name"] == "CheckpointFunctionBackward"]
    assert len(ids) == 2
    page.click("#zoom-fit")
    said = []
    for node_id in ids:
        page.click(f"#graph g.node#{node_id}")
        note = page.locator(f"#details .checkpoint-note[data-checkpoint-node='{node_id}']")
        note.wait_for()
        assert "ran the region's forward under no_grad" in note.inner_text()
        assert note.inner_text().endswith("and a backward of its own inside this pass.")
        said += [m.split(" (")[0] for m in
                 note.locator(".recomputed-modules").inner_text().split(", ")]
    # both regions' forwards, as PyTorch ran them again during backward
    assert sorted(said) == sorted(dict.fromkeys(account["rerun"]))
    watched.shot("reentrant", full_page=False)
