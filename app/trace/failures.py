"""Autograd's common failures, explained in the script's own terms: what happened, the line that
made the problem (not just the line of `backward()`), the nodes involved, the fix as the changed
lines of the script, and the scenario that teaches it.

`explain(doc, source, recorder)` adds `error["explanation"]` and a diagnostic with the failure's
stable code. A failure it does not know keeps torch's message, and the explanation says
`unrecognised`, so the list can grow from what people really hit. Each kind is one function
below: a pattern of torch's message, and what the recorder saw (in-place changes, cuts, the
backward calls, `.grad` reads of non-leaf tensors).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from app.format import clip, diagnostic

from .recorder import Recorder

__all__ = ["KINDS", "SUGGESTED", "explain"]

# how a finding's message offers its fix until it has been run (app/runner/fix_trial.py says
# "Fix:" once the edited script ran to the end)
SUGGESTED = "Suggested change: "

Explanation = dict


class _Script:
    """The script's lines, and edits of them."""

    def __init__(self, source: str) -> None:
        # the lines Python numbers: str.splitlines() would also split at \x0c or \u2028
        self.lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")

    def line(self, n: int | None) -> str:
        return self.lines[n - 1] if n and 0 < n <= len(self.lines) else ""

    @staticmethod
    def indent(text: str) -> str:
        return text[: len(text) - len(text.lstrip())]

    def edit(self, n: int, text: str) -> dict:
        return {"line": n, "before": clip(self.line(n), 10_000), "after": clip(text, 10_000)}


def _explanation(code: str, what: str, line: int | None, fix_say: str, edits: list[dict],
                 scenario: str | None, nodes: list[str] = (), event: int | None = None) -> dict:
    return {"code": code, "what": clip(what), "line": line, "nodes": list(nodes)[:1000],
            "event": event, "fix": {"say": clip(fix_say), "edits": edits} if fix_say else None,
            "scenario": scenario}


def _backward_events(doc: dict) -> list[dict]:
    return [e for e in doc["events"] if e["kind"] == "backward"]


def _failed_event(doc: dict) -> dict | None:
    return next((e for e in reversed(_backward_events(doc)) if e.get("error")), None)


# -- the kinds ---------------------------------------------------------------------------------

def _graph_freed(doc, err, script: _Script, rec: Recorder):
    if "backward through the graph a second time" not in err["message"]:
        return None
    events = _backward_events(doc)
    failed = _failed_event(doc)
    earlier = [e for e in events if not e.get("error") and (failed is None or
                                                           e["index"] < failed["index"])]
    first = earlier[-1] if earlier else None
    line = first["line"] if first else None
    freed = [n for n in failed["graph"]["nodes"]
             if any(s.get("freed") for s in n.get("saved", ()))] if failed else []
    nodes = [n["id"] for n in freed]
    carried = _carried_state(script, freed) if first and failed and \
        first.get("line") == failed.get("line") else None
    if carried is not None:
        stepped = any(e["kind"] == "step" and first["index"] < e["index"] < failed["index"]
                      for e in doc["events"])
        return _carried_graph(err, script, failed, nodes, stepped, *carried)
    text = script.line(line)
    edits = []
    m = re.search(r"\.backward\((.*)\)", text)
    if m:
        inner = m.group(1).strip()
        args = f"{inner}, retain_graph=True" if inner else "retain_graph=True"
        edits = [script.edit(line, text[:m.start(1)] + args + text[m.end(1):])]
    where = f"the backward at line {line}" if line else "an earlier backward"
    return _explanation(
        "graph_freed", f"The backward at line {err['line']} walks a graph that {where} already "
        "walked, and a backward frees the values its nodes saved as it goes (to save memory). "
        "The second walk finds them gone.", line,
        f"keep the saved values for a second backward: retain_graph=True on {where}", edits,
        "retain_graph", nodes, failed["index"] if failed else None)


def _carried_state(script: _Script, freed: list[dict]) -> tuple[str, int] | None:
    """(variable, line) of a tensor a loop carries from one iteration into the next: the freed
    nodes were made at a line that computes a variable from itself (`h = cell(x, h)`), so each
    iteration's graph runs back into the last one's, which its backward already walked."""
    for n in sorted({n.get("line") for n in freed if n.get("line")}):
        m = re.match(r"\s*([A-Za-z_]\w*)\s*=(?!=)(.*)$", script.line(n))
        if m and re.search(rf"\b{re.escape(m.group(1))}\b", m.group(2)):
            return m.group(1), n
    return None


def _carried_graph(err, script: _Script, failed: dict, nodes: list[str], stepped: bool,
                   var: str, line: int):
    text = script.line(line)
    edits = [script.edit(line, f"{script.indent(text)}{var} = {var}.detach()  # a new graph from "
                               f"here: earlier steps' graphs are done\n{text}")]
    what = (f"Line {line} (`{text.strip()}`) computes `{var}` from the `{var}` of the previous "
            f"iteration, so each iteration's graph runs back into the last one's. The backward "
            f"at line {err['line']} walks back into that older graph, which the previous "
            "iteration's backward already walked and freed. (`retain_graph=True` would keep it, "
            "but the graph would grow with every iteration"
            + (", and the optimizer step since has changed the weights it saved)" if stepped
               else ")") + ".")
    return _explanation(
        "carried_graph", what, line,
        f"detach `{var}` at the start of each iteration, so each backward walks one "
        "iteration's graph (truncated back-propagation through time)", edits, "retain_graph",
        nodes, failed["index"])


def _saved_tensor_modified(doc, err, script: _Script, rec: Recorder):
    m = re.search(r"modified by an inplace operation: .*?(?:output (\d+) of (\w+), )?is at "
                  r"version (\d+); expected version (\d+)", err["message"], re.S)
    if not m:
        return None
    of = m.group(2)
    failed = _failed_event(doc)
    candidates = [c for c in rec.inplace if c.line < (err["line"] or 10**9)] or rec.inplace
    matching = next((c for c in reversed(candidates)
                     if of and c.output_of and c.output_of.startswith(of)), None)
    # an optimizer step changes its parameters in place too, unseen as an op (no_grad): it is
    # the culprit when the tensor autograd names can be a parameter (no "output of", or a view
    # of one, of a parameter's size) and no in-place op on that output ran after the step
    stepped = _step_that_changed(rec, failed, int(m.group(4)), int(m.group(3)), of,
                                 _numel(err["message"]), doc.get("params") or {})
    if stepped is not None and (matching is None or
                                rec.inplace.index(matching) < stepped[3]):
        return _step_before_backward(doc, err, script, failed, *stepped[:3])
    chosen = matching or (candidates[-1] if candidates else None)
    nodes = [n["id"] for n in failed["graph"]["nodes"]
             if any(s.get("modified") for s in n.get("saved", ()))] if failed else []
    line = chosen.line if chosen else None
    text = script.line(line)
    var = re.match(r"\s*([A-Za-z_]\w*)\s*(?:\.\w+_\(|\[|[-+*/@%&|^]=)", text)
    edits = []
    if var:
        edits = [script.edit(line, f"{script.indent(text)}{var.group(1)} = "
                                   f"{var.group(1)}.clone()\n{text}")]
    saved = f"the output of {of}" if of else "a tensor"
    what = (f"Line {line} (`{text.strip()}`) changes {saved} in place, after autograd saved it "
            f"for the backward (it was at version {m.group(4)}, now {m.group(3)}). The backward "
            "needs the value as it was." if line else
            f"Something changed {saved} in place after autograd saved it for the backward.")
    return _explanation(
        "saved_tensor_modified", what, line,
        "change a copy, not the saved tensor: clone it before the in-place call (or use the "
        "out-of-place op, e.g. `mul` for `mul_`)", edits, "inplace_version", nodes,
        failed["index"] if failed else None)


# what a parameter reaches a saved tensor through: itself, or a view of it (weight.t())
_VIEWS = ("AsStrided", "TBackward", "ViewBackward", "TransposeBackward", "PermuteBackward",
          "ExpandBackward", "SelectBackward", "SliceBackward", "UnsqueezeBackward",
          "SqueezeBackward", "UnbindBackward", "UnsafeViewBackward")


def _numel(message: str) -> int | None:
    """The number of elements of the tensor an in-place error names ("[torch.FloatTensor
    [8, 1]]"), or None."""
    m = re.search(r"\[torch\.\w+ \[([\d, ]*)\]\]", message)
    if not m:
        return None
    numel = 1
    for part in filter(None, (p.strip() for p in m.group(1).split(","))):
        numel *= int(part)
    return numel


def _step_that_changed(rec: Recorder, failed: dict | None, expected: int, now: int,
                       of: str | None, numel: int | None, params: dict):
    """The optimizer step that moved a parameter of the failing pass's graph past the version
    autograd saved (`expected`): (its line, the optimizer, the parameters, how many in-place
    ops ran before it), the latest one. Only where the tensor autograd names can be such a
    parameter: versions are per tensor, and an activation's 0 -> 1 must not match a leaf's."""
    if failed is None or (of and not of.startswith(_VIEWS)):
        return None
    reached = set(failed.get("uses") or {})

    def fits(name: str) -> bool:
        shape = (params.get(name) or {}).get("shape")
        if numel is None or not isinstance(shape, list):
            return True
        size = 1
        for n in shape:
            size *= n
        return size == numel

    for line, optimizer, versions, inplace_before in reversed(rec.step_versions):
        moved = sorted(name for name, (before, after) in versions.items()
                       if name in reached and before <= expected < after <= now and fits(name))
        if moved:
            return line, optimizer, moved, inplace_before
    return None


def _step_before_backward(doc, err, script: _Script, failed: dict, line: int | None,
                          optimizer: str, params: list[str]):
    """A GAN's order: the discriminator's step runs before the generator's backward, which
    needs the weights that step just changed in place."""
    back = err["line"]
    step_text, back_text = script.line(line).strip(), script.line(back).strip()
    named = ", ".join(f"`{p}`" for p in params[:3]) + (" ..." if len(params) > 3 else "")
    article = "an" if optimizer[:1].upper() in "AEIOU" else "a"
    what = (f"Line {line} (`{step_text}`, {article} {optimizer} step) changes {named} in place, "
            f"and the backward at line {back} (`{back_text}`) needs their values from before the "
            "step: its forward pass used them and autograd saved them. The culprit is the "
            "order of the two lines, not the model.")
    fix = (f"run the backward first: move line {back} (`{back_text}`) above line {line}, so "
           "that every backward that needs these weights runs before the step changes them; "
           "or compute the loss again (a fresh forward) after the step")
    nodes = [n["id"] for n in failed["graph"]["nodes"]
             if any(s.get("modified") for s in n.get("saved", ()))]
    return _explanation("step_before_backward", what, line, fix, [], "inplace_version",
                        nodes, failed["index"])


_CUT_FIX = {"detach()": (".detach()", ""), ".data": (".data", "")}
# values taken out of a graph into a Python number: often only printed, so blamed only when
# nothing else took values out before the failing line
_NUMBERS = {"item", "float()", "int()", "bool()", "tolist", "numpy", "numpy()"}
_CHOICES = {"argmax", "argmin", "argsort", "argwhere", "nonzero", "==", "!=", ">", ">=", "<",
            "<=", "isclose", "logical_and", "logical_or", "logical_not"}
_CASTS = {"long", "int", "short", "byte", "char", "bool", "to", "type"}


def _taken_out(how: str) -> bool:
    """Values taken out of a graph (recorder.py `_note_value_escape`), not a classic cut."""
    return how in _NUMBERS or how in _CHOICES or how in _CASTS or how.startswith("torch.")


def _value_escape(how: str, line: int, script: _Script) -> tuple[str, str, list[dict]]:
    """(cause, fix, edits) for values taken out of a graph by `how` at `line`."""
    text = script.line(line)
    if how in ("torch.tensor", "torch.as_tensor"):
        edits = []
        if how + "(" in text and how + "([" in text.replace(" ", ""):
            edits = [script.edit(line, text.replace(how + "(", "torch.stack(", 1))]
        return (f"with `{how}`, which copies the numbers of tensors that have a graph into a "
                "new tensor that has none",
                "build the tensor with `torch.stack([...])` (or `torch.cat`), which keeps each "
                "element's graph", edits)
    if how in _NUMBERS:
        return (f"with `{how}`, which turns a tensor into a Python number, and a number "
                "carries no graph",
                "keep the values a tensor: compute the loss from the tensor itself, and call "
                f"`{how}` only to print or log it", [])
    if how in _CHOICES:
        kind = "indices" if how.startswith("arg") or how == "nonzero" else "true/false values"
        return (f"with `{how}`, which gives {kind}: there is no gradient through a choice or a "
                "comparison",
                "feed the scores themselves to the loss (for a class, the logits to "
                "`F.cross_entropy`), and use the choice only to read a prediction", [])
    return (f"with `{how}` to an integer type, and integers carry no gradient",
            "keep the values floating point: drop the integer cast before the loss", [])


def _graph_cut(doc, err, script: _Script, rec: Recorder):
    if "does not require grad and does not have a grad_fn" not in err["message"]:
        return None
    before = [(how, line) for how, line in rec.cut_log.history
              if err["line"] is None or line <= err["line"]]
    # no_grad, detach(), .data, requires_grad off: the classic cuts come first; values taken
    # out (a comparison, argmax, a cast) only where none came before (an accuracy line's
    # `argmax` is no culprit for a loss computed under no_grad); a printed `.item()` last
    classic = [(how, line) for how, line in before if not _taken_out(how)]
    taken = [(how, line) for how, line in before if _taken_out(how) and how not in _NUMBERS]
    before = classic or taken or before
    failed = _failed_event(doc)
    outputs = [n["id"] for n in failed["graph"]["nodes"] if n["kind"] == "output"] \
        if failed else []
    if not before:
        return _explanation(
            "nothing_requires_grad", f"`backward()` at line {err['line']} was called on a "
            "tensor computed from tensors none of which requires grad, so autograd recorded no "
            "graph for it.", err["line"],
            "", [], "stop_gradient", outputs, failed["index"] if failed else None)
    how, line = before[-1]
    text = script.line(line)
    edits, say = [], ""
    if how in ("no_grad", "inference_mode"):
        ctx = "torch.no_grad()" if how == "no_grad" else "torch.inference_mode()"
        block = next((n for n in range(line, 0, -1) if ctx in script.line(n)), None)
        if block is not None:
            edits = [script.edit(block, script.line(block).replace(ctx, "torch.enable_grad()"))]
            line = block
        say = (f"compute what you differentiate outside `{ctx}` (or under "
               "`torch.enable_grad()`)")
        code, cause = "no_grad_forward", f"under `{ctx}`"
    elif how in _CUT_FIX and _CUT_FIX[how][0] in text:
        old, new = _CUT_FIX[how]
        edits = [script.edit(line, text.replace(old, new, 1))]
        say, code, cause = f"keep the link to the graph: drop `{old}`", "graph_cut", \
            f"through `{how}`"
    elif how == "requires_grad_(False)":
        edits = [script.edit(line, text.replace("requires_grad_(False)", "requires_grad_(True)"))]
        say, code, cause = "let the tensor require grad", "graph_cut", "by requires_grad_(False)"
    elif _taken_out(how):
        cause, say, edits = _value_escape(how, line, script)
        code = "values_without_graph"
    else:
        say, code, cause = "", "graph_cut", f"by `{how}`"
    return _explanation(
        code, f"Line {line} (`{script.line(line).strip()}`) takes the values out of the graph "
        f"{cause}, so what `backward()` at line {err['line']} starts from has no `grad_fn`: "
        "there is no graph to walk.", line, say, edits, "stop_gradient", outputs,
        failed["index"] if failed else None)


def _scalar_output(doc, err, script: _Script, rec: Recorder):
    if "grad can be implicitly created only for scalar outputs" not in err["message"]:
        return None
    line, text = err["line"], script.line(err["line"])
    m = re.search(r"(\.backward\()\s*\)", text)
    edits = [script.edit(line, text[:m.start()] + ".sum().backward()" + text[m.end():])] \
        if m else []
    failed = _failed_event(doc)
    shape = next((n.get("shape") for n in failed["graph"]["nodes"] if n["kind"] == "output"),
                 None) if failed else None
    return _explanation(
        "scalar_output", f"`backward()` at line {line} starts from a tensor of shape "
        f"{shape or 'with more than one value'}; without a `gradient` argument, autograd can "
        "only start from a single number (a loss).", line,
        "reduce it to one number first (`.sum()` or `.mean()`), or pass `gradient=` of its "
        "shape", edits, None, [], failed["index"] if failed else None)


def _leaf_inplace(doc, err, script: _Script, rec: Recorder):
    view = "a view of a leaf Variable that requires grad" in err["message"]
    if not view and "a leaf Variable that requires grad is being used in an in-place" not in \
            err["message"]:
        return None
    line, text = err["line"], script.line(err["line"])
    edits = [script.edit(line, f"{script.indent(text)}with torch.no_grad():\n"
                               f"{script.indent(text)}    {text.strip()}")] if text else []
    subject = "a view of a parameter (a leaf that requires grad)" if view else \
        "a parameter (a leaf that requires grad)"
    return _explanation(
        "view_of_leaf_inplace" if view else "leaf_inplace",
        f"Line {line} changes {subject} in place while autograd is recording, which would hide "
        "the change from the graph. Updating weights by hand is not something to differentiate.",
        line, "make the update under `torch.no_grad()`", edits, "manual_update")


def _wrong_gradient_count(doc, err, script: _Script, rec: Recorder):
    m = re.search(r"function (\w+) returned an incorrect number of gradients \(expected "
                  r"(\d+), got (\d+)\)", err["message"])
    if not m:
        return None
    node, line, edits = _custom_backward(doc, m.group(1))
    text = script.line(line)
    missing = int(m.group(2)) - int(m.group(3))
    r = re.match(r"(\s*return\s+)(.*?)\s*$", text)
    if r and missing > 0:
        edits = [script.edit(line, f"{r.group(1)}{r.group(2)}" + ", None" * missing)]
    return _explanation(
        "wrong_gradient_count", f"The backward of `{m.group(1).removesuffix('Backward')}` "
        f"(line {line}) returns {m.group(3)} gradient(s), but its forward took {m.group(2)} "
        "inputs: backward returns one per input, `None` for an input that needs none.", line,
        "return one gradient per input of forward, None where there is none", edits,
        "custom_function", [node] if node else [])


def _invalid_gradient(doc, err, script: _Script, rec: Recorder):
    m = re.search(r"Function (\w+) returned an invalid gradient at index (\d+) - (?:expected "
                  r"(dtype|device) (\S+) but got (\S+)|got (\[.*?\]) but expected shape "
                  r"compatible with (\[.*?\]))", err["message"])
    if not m:
        return None
    node, line, edits = _custom_backward(doc, m.group(1))
    text = script.line(line)
    name = m.group(1).removesuffix("Backward")
    if m.group(3):
        kind, want, got = m.group(3), m.group(4), m.group(5)
        r = re.match(r"(\s*return\s+)(.*?)\s*$", text)
        target = f"torch.{_DTYPES.get(want, want)}" if kind == "dtype" else repr(want)
        if r and "," not in r.group(2):
            edits = [script.edit(line, f"{r.group(1)}({r.group(2)}).to({target})")]
        what = (f"The backward of `{name}` (line {line}) returns gradient {m.group(2)} as "
                f"{kind} {got}, but its input is {kind} {want}.")
        say = f"return the gradient on the input's {kind}: `.to({target})`"
    else:
        what = (f"The backward of `{name}` (line {line}) returns gradient {m.group(2)} of shape "
                f"{m.group(6)}, but its input has shape {m.group(7)}.")
        say = "return a gradient of the input's shape (one value per input value)"
    return _explanation("invalid_gradient", what, line, say, edits, "custom_function",
                        [node] if node else [])


_DTYPES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
           "int": "int32"}


def _custom_backward(doc: dict, node_name: str) -> tuple[str | None, int | None, list]:
    """The node of a custom Function by its grad_fn name, and the line of its backward's
    `return` in the script."""
    for event in reversed(_backward_events(doc)):
        for n in event["graph"]["nodes"]:
            if n["name"] == node_name and n.get("backward_source"):
                src = n["backward_source"]
                if src["file"] != "<script>":
                    return n["id"], None, []
                for i, text in enumerate(src["source"].splitlines()):
                    if text.strip().startswith("return"):
                        return n["id"], src["line"] + i, []
                return n["id"], src["line"], []
    return None, None, []


# what the worker has for a script to import besides the standard library (the worker
# preloads them: app/runner/worker.py, pyproject.toml)
OFFERED = ("torch", "numpy", "scipy", "matplotlib", "tqdm", "torchviz")


def _missing_module(doc, err, script: _Script, rec: Recorder):
    """Not autograd's, but the first thing a pasted script hits: an import the worker lacks."""
    m = re.match(r"No module named '([^']+)'", err["message"])
    if err["type"] != "ModuleNotFoundError" or not m:
        return None
    name, line = m.group(1), err["line"]
    return _explanation(
        "missing_module", f"Line {line} imports `{name}`, which this server's worker does not "
        f"have. Besides Python's standard library it offers {', '.join(OFFERED)}.", line,
        f"remove what needs `{name}` (a plot or a progress bar can usually go), or run the "
        "script on your own machine", [], None)


KINDS: list[Callable] = [_missing_module, _graph_freed, _saved_tensor_modified, _graph_cut,
                         _scalar_output, _leaf_inplace, _wrong_gradient_count, _invalid_gradient]


# kinds explained by what the recorder saw the script's operations do (the in-place changes,
# the cuts): past the kept passes it no longer watches them (recorder.py `_stop_watching`)
_WATCHED = {
    "saved_tensor_modified": (
        "A tensor autograd saved for the backward was changed in place before the backward "
        "used it (the message names it).", "in-place change"),
    "graph_cut": ("The backward started from a tensor with no `grad_fn`: nothing links it to "
                  "a graph.", "line that took values out of a graph"),
}
_WATCHED.update({code: _WATCHED["graph_cut"] for code in (
    "no_grad_forward", "values_without_graph", "nothing_requires_grad")})


def _unwatched(found: dict, err: dict, script: _Script, watched_until: dict) -> dict:
    """A failure the recorder would explain from operations it saw, after it had stopped
    watching them: what torch's message says, that the culprit went unseen, and how to watch
    the whole run. The line it last saw is said as only that (it may not be the culprit)."""
    cause, seen = _WATCHED[found["code"]]
    at = f" (line {watched_until['line']})" if watched_until.get("line") else ""
    line = found["line"]
    earlier = (f" The last {seen} it saw before then was at line {line} "
               f"(`{script.line(line).strip()}`), which may not be the one."
               if line and found["code"] != "nothing_requires_grad" else "")
    what = (f"{cause} This came after backward pass {watched_until['passes']}{at}: past the "
            f"first {watched_until['records']} passes, the ones this run records, autograd-lab "
            "stops watching each operation so that the rest of the script runs at plain speed, "
            f"and it did not see which line did this.{earlier} To have every operation watched, "
            "trace it again on the command line with `autograd-lab trace --watch-all`.")
    return _explanation("unwatched_failure", what, err["line"], "", [], found["scenario"],
                        [], found["event"])


def explain(doc: dict, source: str, recorder: Recorder) -> None:
    """Explain `doc`'s error, if it is one of autograd's; note `.grad` reads of non-leaves."""
    script = _Script(source)
    err = doc.get("error")
    if err and err["type"] not in ("Timeout", "SyntaxError", "DeviceUnavailable", "NoGraph"):
        found = None
        for kind in KINDS:
            found = kind(doc, err, script, recorder)
            if found:
                break
        if found is not None and recorder.watched_until is not None and \
                found["code"] in _WATCHED:
            found = _unwatched(found, err, script, recorder.watched_until)
        if found is None:
            err["explanation"] = {"code": "unrecognised", "what": None, "line": err["line"],
                                  "nodes": [], "event": None, "fix": None, "scenario": None}
        else:
            err["explanation"] = found
            offered = f" {SUGGESTED}{found['fix']['say']}." if found["fix"] else ""
            finding = diagnostic(found["code"], "error", found["what"] + offered,
                                 nodes=found["nodes"], event=found["event"])
            doc["diagnostics"].append({**finding, "explanation": found})
    names_by_line: dict[int, list[str | None]] = {}
    for line, name in recorder.nonleaf_grad_reads:
        names = names_by_line.setdefault(line, [])
        if name not in names:
            names.append(name)
    for line in sorted(names_by_line)[:5]:
        doc["diagnostics"].append(_nonleaf_grad(script, line, names_by_line[line], doc))


def _nonleaf_grad(script: _Script, line: int, held_in: list[str | None], doc: dict) -> dict:
    """The warning for a line that read `.grad` of non-leaves, naming the variables that held
    them (the recorder saw which), not the first `.grad` written on the line."""
    text = script.line(line)
    names = [n for n in held_in if n and re.search(rf"\b{re.escape(n)}\.grad\b", text)]
    # held in no variable (`model(x).grad`): said as "the tensor", with no edit to guess
    backward = next((e["line"] for e in _backward_events(doc) if e.get("line")), None)
    where = f" before the backward at line {backward}" if backward else ""
    edits = []
    if names and backward:
        call = script.line(backward)
        keep = "".join(f"{script.indent(call)}{n}.retain_grad()\n" for n in names)
        edits = [script.edit(backward, f"{keep}{call}")]
    if len(names) > 1:
        listed = ", ".join(f"`{n}`" for n in names[:-1]) + f" and `{names[-1]}`"
        reads = ", ".join(f"`{n}.grad`" for n in names[:-1]) + f" and `{names[-1]}.grad`"
        what = (f"Line {line} reads {reads}, but {listed} are computed, not leaves: autograd "
                "passes their gradients on without keeping them, so their `.grad` is None.")
        say = f"call {', '.join(f'`{n}.retain_grad()`' for n in names)}{where} to keep them"
    else:
        name = names[0] if names else "the tensor"
        what = (f"Line {line} reads `{name}.grad`, but `{name}` is computed, not a leaf: "
                "autograd passes its gradient on without keeping it, so `.grad` is None.")
        say = f"call `{name}.retain_grad()`{where} to keep it"
    found = _explanation("nonleaf_grad", what, line, say, edits, "tensor_hooks")
    return {**diagnostic("nonleaf_grad", "warning", f"{found['what']} {SUGGESTED}"
                         f"{found['fix']['say']}."), "explanation": found}
