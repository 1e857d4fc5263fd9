"""The checkpointing scenario's page says what the checkpoint no longer keeps, what it keeps,
and which forwards ran again during backward (static/js/checkpoints.js), each number and name
against the scenario run plainly with PyTorch (the account of tests/scenarios/
test_checkpointing.py: an outer saved_tensors_hooks pack hook, a forward pre-hook during
backward)."""

from __future__ import annotations

import re

import pytest
import torch

from tests.scenarios.helpers import run_plainly
from tests.scenarios.test_checkpointing import pytorch_account

from .conftest import api_trace, open_scenario

pytestmark = pytest.mark.browser


def region_inputs(variant: str) -> dict[str, torch.Tensor]:
    """The tensor each checkpointed block was called with, in a plain run."""
    ns = run_plainly("checkpointing", "--variant", variant)
    seen: dict[str, torch.Tensor] = {}
    handles = [ns["model"].blocks[i].register_forward_pre_hook(
        lambda m, args, i=i: seen.setdefault(f"blocks.{i}", args[0])) for i in ns["CHECKPOINTED"]]
    ns["model"](ns["x"])
    for handle in handles:
        handle.remove()
    return seen


def test_a_checkpointed_region_says_what_it_keeps_and_what_ran_again(watched):
    page = watched.page
    account = pytorch_account(run_plainly, "with")
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
    account = pytorch_account(run_plainly, "without")
    open_scenario(watched, "checkpointing", "variant=without")
    page.wait_for_selector("#details .saved-memory")
    held = page.locator("#details .saved-memory p").first
    assert int(held.get_attribute("data-held")) == account["held"]
    assert page.locator("#details .checkpoint-pass").count() == 0
    assert "checkpoint" not in held.inner_text()


def test_a_reentrant_checkpoint_s_node_says_it_ran_its_forward_again(watched):
    page = watched.page
    account = pytorch_account(run_plainly, "reentrant")
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


def test_the_memory_bars_are_the_trace_s_bytes_by_module(watched):
    """The pass's bars on the scenario page, then every variant's on the compare page, one
    scale for all: each bar's number is the Trace's by_module (itself checked against a pack
    hook in tests/trace/test_saved_memory.py), and its length is that number over the largest."""
    page = watched.page
    open_scenario(watched, "checkpointing", "variant=without")
    [event] = [e for e in api_trace(watched, "checkpointing", "variant=without")["events"]
               if e["kind"] == "backward"]
    page.wait_for_selector("#details .saved-by-module li[data-bytes]")
    by_module = {m: b for m, b in event["saved_memory"]["by_module"].items() if b > 0}
    shown = bars(page, "#details")
    assert shown and set(shown) <= set(by_module)
    assert {m: b for m, (b, _) in shown.items()} == {m: by_module[m] for m in shown}
    largest = max(by_module.values())
    assert max(by_module.values()) in [b for b, _ in shown.values()]  # the largest is shown
    for b, width in shown.values():
        assert width == pytest.approx(100 * b / largest, abs=0.01)
    watched.shot("bars", full_page=False)

    page.goto(watched.base + "/scenarios/checkpointing/compare")
    page.wait_for_function("() => [...document.querySelectorAll('.compare-status')].every("
                           "s => /event/.test(s.textContent))")
    page.wait_for_selector(".compare-memory li[data-bytes]")
    held, columns = {}, {}
    for variant in ("without", "with", "reentrant"):
        [ev] = [e for e in api_trace(watched, "checkpointing", f"variant={variant}")["events"]
                if e["kind"] == "backward"]
        card = f".compare-card[data-variant='{variant}']"
        held[variant] = int(page.locator(f"{card} .compare-memory p[data-held]").get_attribute(
            "data-held"))
        assert held[variant] == ev["saved_memory"]["held_bytes"]
        columns[variant] = bars(page, card)
        assert {m: b for m, (b, _) in columns[variant].items()} == \
            {m: ev["saved_memory"]["by_module"][m] for m in columns[variant]}
    assert held["with"] < held["without"]
    # the reentrant column's blocks 1 and 2 got their gradients in the checkpoint's own
    # backward: "inner", as the run page says, never "0" (PyTorch filled their .grad)
    reentrant = ".compare-card[data-variant='reentrant']"
    [ev] = [e for e in api_trace(watched, "checkpointing", "variant=reentrant")["events"]
            if e["kind"] == "backward"]
    for name in ev["inner"]:
        row = page.locator(f"{reentrant} tr[data-param='{name}']")
        assert row.locator("td.uses").inner_text() == "inner", name
        assert row.locator("td.grad").inner_text() != "None", name
    # one scale across the columns: the largest module of all draws the full bar
    everything = [bw for col in columns.values() for bw in col.values()]
    top = max(b for b, _ in everything)
    for b, width in everything:
        assert width == pytest.approx(100 * b / top, abs=0.01)
    watched.shot("compare", full_page=True)


def bars(page, scope: str) -> dict[str, tuple[int, float]]:
    """module -> (bytes the bar says, the bar's width in percent), as the page drew them."""
    rows = page.evaluate("""scope => [...document.querySelectorAll(
        `${scope} .saved-by-module li[data-bytes]`)].map(li => [li.dataset.module,
        Number(li.dataset.bytes), li.querySelector('rect').getAttribute('width'),
        li.textContent])""", scope)
    out = {}
    for module, size, width, text in rows:
        # the name, then the bytes as people read them (powers of 1000, 2 or 3 digits)
        said = re.fullmatch(rf"{re.escape(module)} ([\d.]+) (B|kB|MB|GB)", text.strip())
        assert said, text
        number = float(said.group(1)) * UNITS[said.group(2)]
        assert abs(number - size) <= 0.05 * size, (text, size)
        out[module] = (size, float(width.rstrip("%")))
    return out


UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}
