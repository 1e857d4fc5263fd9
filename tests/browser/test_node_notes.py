"""A node's panel says in one line what its backward does (static/js/op_notes.js; each
sentence is checked against PyTorch in tests/trace/test_op_notes.py): a relu's, on a real
run's page; an operation with no sentence gets none."""

from __future__ import annotations

import httpx
import pytest

from tests.trace.test_op_notes import notes

pytestmark = pytest.mark.browser

SCRIPT = """\
import torch

w = torch.randn(3, requires_grad=True)
loss = torch.relu(w * 2).sum()
loss.backward()
"""


def test_a_nodes_panel_says_what_its_backward_does(watched):
    page = watched.page
    run = httpx.post(watched.base + "/api/runs", json={"source": SCRIPT}, timeout=120).json()
    nodes = {n["name"]: n["id"] for n in run["events"][0]["graph"]["nodes"]}
    page.goto(watched.base + run["run"]["link"])
    page.wait_for_selector("#graph svg g.node")
    page.wait_for_selector("#progress", state="hidden")
    said = notes()
    page.click(f"#graph svg g.node#{nodes['ReluBackward0']}")
    page.wait_for_function("(id) => document.querySelector('.node-view')?.dataset.node === id",
                           arg=nodes["ReluBackward0"])
    assert page.text_content("#details-body .op-note") == said["ReluBackward0"]
    # a node with no sentence gets none, rather than a guess
    page.click(f"#graph svg g.node#{nodes['MulBackward0']}")
    page.wait_for_function("(id) => document.querySelector('.node-view')?.dataset.node === id",
                           arg=nodes["MulBackward0"])
    assert page.locator("#details-body .op-note").count() == 0
    watched.shot("relu-note", full_page=False)


TWO_ROOTS = """\
import torch

w = torch.ones(2, requires_grad=True)
shared = torch.tanh(w)
torch.autograd.backward([(shared * 2).sum(), (shared * shared).sum()])
"""


def test_a_pass_from_two_roots_says_it_is_one_pass(watched):
    """The event notice over the graph (status.js rootsNote; its claim is checked against
    PyTorch in tests/trace/test_roots_and_calls.py)."""
    page = watched.page
    run = httpx.post(watched.base + "/api/runs", json={"source": TWO_ROOTS}, timeout=120).json()
    assert [e["kind"] for e in run["events"]] == ["backward"]
    page.goto(watched.base + run["run"]["link"])
    page.wait_for_selector("#graph svg g.node")
    page.wait_for_selector("#event-notice", state="visible")
    text = page.text_content("#event-notice")
    assert text.startswith("One pass from 2 roots at line 5") and "one backward() per root" in text
    # a pass from one root says nothing of the kind
    single = httpx.post(watched.base + "/api/runs", json={"source": SCRIPT}, timeout=120).json()
    page.goto(watched.base + single["run"]["link"])
    page.wait_for_selector("#graph svg g.node")
    page.wait_for_selector("#progress", state="hidden")
    assert page.is_hidden("#event-notice")


def test_the_memory_held_for_backward_is_shown_as_pytorch_counts_it(watched):
    """The details panel with nothing picked says what the pass held for backward; the number
    is the pack hook's account of the same script (tests/trace/test_saved_memory.py)."""
    from tests.trace.test_saved_memory import MLP, pytorch_account

    expected = pytorch_account(MLP)
    page = watched.page
    run = httpx.post(watched.base + "/api/runs", json={"source": MLP}, timeout=120).json()
    page.goto(watched.base + run["run"]["link"])
    page.wait_for_selector("#graph svg g.node")
    page.wait_for_selector("#details .saved-memory")
    line = page.locator("#details .saved-memory p").first
    assert int(line.get_attribute("data-held")) == expected["held_bytes"]
    assert int(line.get_attribute("data-leaf")) == expected["leaf_bytes"]
    assert line.inner_text().startswith("Held for backward #0: ")
    modules = page.locator("#details .saved-by-module li code").all_inner_texts()
    assert modules and set(modules) <= set(expected["by_module"])
    watched.shot("saved-memory", full_page=False)


def test_a_saved_tensors_versions_are_said_as_pytorch_counts_them(watched):
    """Changed in place after the save (backward fails) and before it (harmless): the panel's
    versions are torch's own (tests/trace/test_saved_versions.py runs both plainly)."""
    import re

    from tests.trace.test_saved_versions import CHANGED_AFTER, CHANGED_BEFORE, _plain

    page = watched.page
    now, then = re.search(r"is at version (\d+); expected version (\d+)",
                          _plain(CHANGED_AFTER)["error"]).groups()
    for code, node_name, said in (
            (CHANGED_AFTER, "TanhBackward0",
             f"saved at version {then}, now at version {now}: changed in place after it was "
             "saved, so this backward cannot use it"),
            (CHANGED_BEFORE, "SinBackward0",
             f"version {_plain(CHANGED_BEFORE)['before_backward']}: changed in place before it "
             "was saved, which does this backward no harm")):
        source = "\n".join(line[4:] for line in code.strip("\n").splitlines()) + "\n"
        run = httpx.post(watched.base + "/api/runs", json={"source": source}, timeout=120).json()
        node_id = {n["name"]: n["id"] for n in run["events"][0]["graph"]["nodes"]}[node_name]
        page.goto(watched.base + run["run"]["link"])
        page.wait_for_selector("#graph svg g.node")
        page.wait_for_selector("#progress", state="hidden")
        page.click(f"#graph svg g.node#{node_id}")
        page.wait_for_function("(id) => document.querySelector('.node-view')?.dataset.node === id",
                               arg=node_id)
        assert said in page.text_content("#details-body table.saved")
    watched.shot("saved-version", full_page=False)


def test_the_forwards_peak_is_shown_as_torchs_profiler_reads_it(watched):
    """Beside what the pass held for backward: the allocator's peak in its forward and what it
    held when backward began, as torch.profiler reads the same forward run plainly
    (tests/trace/test_forward_memory.py), and what measured them."""
    from tests.trace.test_forward_memory import GRAD, SETUP, SLACK, plain_profile

    peak, held = plain_profile(SETUP, GRAD)
    page = watched.page
    source = SETUP + GRAD + "loss.backward()\n"
    run = httpx.post(watched.base + "/api/runs", json={"source": source}, timeout=120).json()
    page.goto(watched.base + run["run"]["link"])
    page.wait_for_selector("#graph svg g.node")
    line = page.locator("#details .saved-memory p.forward-memory")
    line.wait_for()
    assert abs(int(line.get_attribute("data-peak")) - peak) < SLACK
    assert abs(int(line.get_attribute("data-held")) - held) < SLACK
    text = line.inner_text()
    assert text.startswith(f"Peak during the forward: {round(peak / 1e6, 1)} MB above its start")
    assert f"held when backward began: {round(held / 1e6, 1)} MB" in text
    assert "Measured on the CPU by PyTorch's profiler" in text
    watched.shot("forward-memory", full_page=False)
