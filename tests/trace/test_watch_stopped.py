"""Past the passes a run records, the tracer stops watching each operation (issue 36: the rest
of a training script at plain speed). What it no longer sees is said; a failure that would be
explained from it says it came unwatched; everything else (the Trace's passes and steps, the
script's output, its error) is what watching the whole run gives, and what plain Python gives."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

from app.trace.recorder import RecordingLimits

from ..trace_facts import diagnostics

WATCH_ALL = RecordingLimits(watch_whole_run=True)

# 30 steps: 10 recorded and watched, 20 past them; prints what only the script can see
TRAINING = """\
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range(30):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    if step in (5, 25):
        print(step, len(torch.overrides._get_current_function_mode_stack()),
              len(torch.nn.modules.module._global_forward_hooks))
print(f"{loss.item():.6f}", [round(v, 6) for v in model[0].weight.flatten()[:4].tolist()])
"""

# an in-place change of a saved tensor at pass 21, long after the kept passes
LATE_INPLACE = """\
import torch
w = torch.ones(3, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for step in range(30):
    opt.zero_grad()
    a = (w * 2).sigmoid()
    if step == 20:
        a.mul_(2)
    a.sum().backward()
    opt.step()
print("done")
"""

# each step reads an accuracy under no_grad (a cut the recorder sees in the first passes); the
# failing cut, a detach(), comes only at pass 16
LATE_DETACH = """\
import torch
w = torch.ones(3, requires_grad=True)
x = torch.randn(5, 3)
for step in range(20):
    loss = (x @ w).pow(2).mean()
    with torch.no_grad():
        accuracy = (x @ w > 0).float().mean()
    if step == 15:
        loss = loss.detach()
    loss.backward()
print("done")
"""


def _plain(tmp_path, source: str) -> subprocess.CompletedProcess:
    path = tmp_path / "plain.py"
    path.write_text(source, encoding="utf-8")
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=120)


def _line_of(source: str, text: str) -> int:
    return next(n for n, line in enumerate(source.splitlines(), 1) if text in line)


def _without(doc: dict, *codes: str) -> list[dict]:
    return [d for d in doc["diagnostics"] if d["code"] not in codes]


def test_past_the_kept_passes_the_mode_and_module_hooks_are_gone_and_it_is_said(trace_source,
                                                                                 tmp_path):
    doc = trace_source(TRAINING)
    whole = trace_source(TRAINING, limits=WATCH_ALL)
    plain = _plain(tmp_path, TRAINING).stdout
    assert doc["error"] is None and whole["error"] is None, (doc["error"], whole["error"])
    # as the script itself sees it: at step 5 the tracer's mode and its two module hooks are
    # there (plain Python has neither), at step 25 they are gone; watched whole, still there
    first, late, result = doc["stdout"].splitlines()
    assert first == "5 1 1" and late == "25 0 0", doc["stdout"]
    assert whole["stdout"].splitlines()[1] == "25 1 1", whole["stdout"]
    assert plain.splitlines()[1] == "25 0 0"
    # the script's result is plain Python's, either way
    assert result == plain.splitlines()[-1] == whole["stdout"].splitlines()[-1]
    (note,) = diagnostics(doc, "watch_stopped")
    loop_backward = _line_of(TRAINING, "loss.backward()")
    assert note["message"].startswith("autograd-lab watched every torch operation and module "
                                      f"call through backward pass 10 (line {loop_backward}; "
                                      "it records the first 10)"), note["message"]
    assert "--watch-all" in note["message"]
    assert diagnostics(whole, "watch_stopped") == []
    # the recorded passes and steps, and every other finding, are the same as watched whole
    assert doc["events"] == whole["events"]
    assert doc["events_skipped"] == whole["events_skipped"] == {"backward": 20, "step": 20}
    assert doc["params"] == whole["params"]
    assert _without(doc, "watch_stopped") == whole["diagnostics"]


def test_fewer_passes_than_kept_are_watched_to_the_end(trace_source):
    short = TRAINING.replace("range(30)", "range(8)").replace("(5, 25)", "(5, 7)")
    doc = trace_source(short)
    assert doc["stdout"].splitlines()[:2] == ["5 1 1", "7 1 1"]
    assert diagnostics(doc, "watch_stopped") == []


def test_a_late_in_place_change_is_said_unwatched_not_blamed_on_a_guess(trace_source, tmp_path):
    doc = trace_source(LATE_INPLACE)
    whole = trace_source(LATE_INPLACE, limits=WATCH_ALL)
    plain = _plain(tmp_path, LATE_INPLACE)
    # the script's error is plain Python's, line and message, either way
    last = plain.stderr.strip().splitlines()[-1]
    for d in (doc, whole):
        err = d["error"]
        assert f"{err['type']}: {err['message']}" == last
        assert err["line"] == _line_of(LATE_INPLACE, "a.sum().backward()")
        assert f'line {err["line"]}' in plain.stderr
    ex = doc["error"]["explanation"]
    assert ex["code"] == "unwatched_failure" and ex["fix"] is None
    assert "changed in place" in ex["what"] and "after backward pass 10" in ex["what"]
    assert "did not see which line did this" in ex["what"] and "--watch-all" in ex["what"]
    assert diagnostics(doc, "watch_stopped")
    # watched whole, the line that changed it is found, as before
    ex = whole["error"]["explanation"]
    assert ex["code"] == "saved_tensor_modified"
    assert ex["line"] == _line_of(LATE_INPLACE, "a.mul_(2)")
    assert doc["events"] == whole["events"] and doc["stdout"] == whole["stdout"] == plain.stdout


def test_a_late_cut_names_the_cut_it_saw_only_as_the_last_seen(trace_source, tmp_path):
    doc = trace_source(LATE_DETACH)
    whole = trace_source(LATE_DETACH, limits=WATCH_ALL)
    last = _plain(tmp_path, LATE_DETACH).stderr.strip().splitlines()[-1]
    assert f"{doc['error']['type']}: {doc['error']['message']}" == last
    assert f"{whole['error']['type']}: {whole['error']['message']}" == last
    ex = doc["error"]["explanation"]
    no_grad = _line_of(LATE_DETACH, "with torch.no_grad()")
    assert ex["code"] == "unwatched_failure" and ex["line"] == doc["error"]["line"]
    # the no_grad read, seen in every watched step, is said as only what it was
    assert f"was at line {no_grad}" in ex["what"] and "may not be the one" in ex["what"]
    assert "after backward pass 10" in ex["what"]  # when watching stopped
    ex = whole["error"]["explanation"]
    assert ex["code"] == "graph_cut" and ex["line"] == _line_of(LATE_DETACH, "loss.detach()")


def test_an_early_failure_is_the_same_either_way(trace_source):
    early = LATE_INPLACE.replace("step == 20", "step == 3")
    doc = trace_source(early)
    whole = trace_source(early, limits=WATCH_ALL)
    assert doc["error"]["explanation"]["code"] == "saved_tensor_modified"
    assert doc["error"] == whole["error"]
    assert doc["events"] == whole["events"] and doc["diagnostics"] == whole["diagnostics"]
    assert diagnostics(doc, "watch_stopped") == []


def test_a_mode_the_script_entered_keeps_the_tracer_watching_until_it_ends(trace_source):
    """A TorchFunctionMode's exit pops whichever mode is innermost: while the script's own
    (`torch.device`'s here) is inside the tracer's, the tracer keeps watching, and stops at
    the first backward after it ended."""
    inside = LATE_INPLACE.replace("for step in range(30):\n", "device = torch.device('cpu')\n"
                                  "device.__enter__()\nfor step in range(30):\n"
                                  "    if step == 15:\n        device.__exit__(None, None, None)\n")
    inside = inside.replace("step == 20", "step == 12")
    doc = trace_source(inside)
    ex = doc["error"]["explanation"]
    assert ex["code"] == "saved_tensor_modified", ex  # pass 13: still watched
    assert ex["line"] == _line_of(inside, "a.mul_(2)")
    assert diagnostics(doc, "watch_stopped") == []
    # the script failed inside its device mode: neither it nor ours stays on in this process
    assert torch.overrides._get_current_function_mode_stack() == []

    late = inside.replace("step == 12", "step == 20")
    doc = trace_source(late)
    (note,) = diagnostics(doc, "watch_stopped")
    assert "through backward pass 15 (it records the first 10)" in note["message"], note
    assert doc["error"]["explanation"]["code"] == "unwatched_failure"
    assert "after backward pass 15" in doc["error"]["explanation"]["what"]


def test_torch_state_is_plain_again_after_a_run_that_stopped_watching(trace_source):
    trace_source(TRAINING)
    assert torch.overrides._get_current_function_mode_stack() == []
    assert not torch.nn.modules.module._global_forward_hooks
    assert not torch.nn.modules.module._global_forward_pre_hooks
    assert not torch.is_anomaly_enabled()


def test_source_is_dedented_as_the_fixture_does():
    # the fixture dedents; these scripts start at column 0, so the lines the tests compute
    # from them are the lines the tracer numbers
    for source in (TRAINING, LATE_INPLACE, LATE_DETACH):
        assert textwrap.dedent(source) == source


def test_watch_all_reaches_the_sandboxed_worker_and_both_reports_are_valid():
    """The real path (the CLI's): `watch_all` goes in the job to a confined worker, whose
    report the runner validates against the schema."""
    from app.runner import trace_in_sandbox

    doc = trace_in_sandbox(source=LATE_INPLACE, name="late.py")
    whole = trace_in_sandbox(source=LATE_INPLACE, name="late.py", watch_all=True)
    assert doc["error"]["explanation"]["code"] == "unwatched_failure", doc["error"]
    assert whole["error"]["explanation"]["code"] == "saved_tensor_modified", whole["error"]
    assert whole["error"]["explanation"]["line"] == _line_of(LATE_INPLACE, "a.mul_(2)")


def test_a_graph_drawn_after_watching_stopped_is_said_to_lack_its_lines(trace_source):
    source = ("import torch\nfrom torchviz import make_dot\n"
              "w = torch.ones(3, requires_grad=True)\nfor step in range(12):\n"
              "    loss = (w * 2).sigmoid().sum()\n    loss.backward()\nmake_dot(loss)\n")
    doc = trace_source(source)
    whole = trace_source(source, limits=WATCH_ALL)
    (note,) = diagnostics(doc, "views_unwatched")
    assert note["message"].startswith("1 graph(s) the script drew after backward pass 10 show "
                                      "no script line or module")
    assert diagnostics(whole, "views_unwatched") == []
    # the same graph either way, with the line that made its nodes only when watched
    lines = {n["name"]: n.get("line") for n in doc["views"][0]["graph"]["nodes"]}
    watched = {n["name"]: n.get("line") for n in whole["views"][0]["graph"]["nodes"]}
    assert lines.keys() == watched.keys()
    assert watched["SigmoidBackward0"] == _line_of(source, ".sigmoid()")
    assert lines["SigmoidBackward0"] is None


def test_what_autograd_lab_draws_after_the_script_is_watched_again(trace_source):
    """A torch.func forward is drawn after the script ends (func_forward.py): watching has
    stopped by then in a long script, and starts again for it, so its nodes keep their lines
    and modules, as in a run watched whole."""
    source = ("import torch\nfrom torch import nn\nfrom torch.func import functional_call, grad\n"
              "torch.manual_seed(0)\nmodel = nn.Sequential(nn.Linear(3, 4), nn.Tanh())\n"
              "x = torch.randn(5, 3)\nfor step in range(12):\n"
              "    model(x).pow(2).sum().backward()\n"
              "params = {k: v.detach() for k, v in model.named_parameters()}\n"
              "g = grad(lambda p: functional_call(model, p, (x,)).sum())(params)\n")
    doc = trace_source(source)
    whole = trace_source(source, limits=WATCH_ALL)
    assert doc["error"] is None and diagnostics(doc, "watch_stopped")
    assert diagnostics(doc, "views_unwatched") == []

    def nodes(d: dict) -> list[tuple]:
        (view,) = [v for v in d["views"] if v["kind"] == "func_forward"]
        return sorted((n["name"], n.get("line"), n.get("module"))
                      for n in view["graph"]["nodes"])

    assert nodes(doc) == nodes(whole)
    assert ("TanhBackward0", _line_of(source, "g = grad("), "1") in nodes(doc)


# what a step past the kept passes runs beside the script's own work, as PyTorch shows it:
# anomaly mode, the hooks on the parameters and on the pass's graph, a default saved-tensor
# hook, Python's trace and profile functions, torch's threads; then every .grad, exactly
PAST_THE_KEPT = """\
import sys
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range(25):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    if step == 24:
        print(torch.is_anomaly_enabled(), torch.is_grad_enabled(),
              [(p._backward_hooks, p._post_accumulate_grad_hooks) for p in model.parameters()],
              torch._C._autograd._top_saved_tensors_default_hooks(False),
              sys.gettrace(), sys.getprofile(), torch.get_num_threads())
    loss.backward()
    if step == 24:
        print([p.grad.flatten().tolist() for p in model.parameters()])
    opt.step()
"""


def test_past_the_kept_passes_a_step_runs_what_a_plain_step_runs(trace_source, tmp_path):
    doc = trace_source(PAST_THE_KEPT)
    plain = _plain(tmp_path, PAST_THE_KEPT)
    assert doc["error"] is None and plain.returncode == 0, (doc["error"], plain.stderr)
    assert diagnostics(doc, "watch_stopped")
    # no anomaly mode, no tensor or saved-tensor hook, no trace function: as plain Python has
    # it (the traced run's threads are the worker's business: compared only where both set)
    state, grads = doc["stdout"].splitlines()
    plain_state, plain_grads = plain.stdout.splitlines()
    assert state.rsplit(" ", 1)[0] == plain_state.rsplit(" ", 1)[0], (state, plain_state)
    assert state.startswith("False True ") and "None None None" in state
    # the gradients of the 25th pass, to the last bit, are the ones plain PyTorch leaves
    assert grads == plain_grads
