"""The Trace document's shape as Python types: what the tracer writes, the runner completes and
the web layer serves (routers declare them, so /docs shows the shape).

`trace.schema.json` says the same for every other reader (the browser, programs, the validator);
`tests/format/test_types.py` checks that each TypedDict names the properties and the required
keys of its JSON Schema definition, so the two cannot drift apart.

`typing_extensions.TypedDict`, not `typing.TypedDict`: pydantic (FastAPI's response models)
accepts only the former on Python < 3.12.
"""

# (no `from __future__ import annotations`: TypedDict reads NotRequired[...] only when evaluated)

from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

__all__ = [
    "FORMAT", "Number", "TensorSummary", "SavedValue", "BackwardSource", "Gradcheck", "Node",
    "Edge", "Cut", "Graph", "Contribution", "GradChange", "EventError", "BackwardEvent",
    "StepChange", "StepCheck", "StepEvent", "Event", "Param", "Diagnostic", "ErrorRecord", "Script",
    "EventsSkipped", "RunLink", "Trace", "NodeKind", "DiagnosticLevel", "Edit", "Fix", "FixTried",
    "Explanation", "Figure", "View", "ViewMatch", "DoubleCheck", "FxOp", "FxGraph",
    "SavedForBackward", "RecomputedOp", "CompiledRegion",
]

FORMAT = "autograd-lab/trace@1"

# JSON has no NaN or infinity: they are written "NaN", "Infinity", "-Infinity"
Number = float | str
NodeKind = Literal["op", "custom", "param", "leaf", "output"]
DiagnosticLevel = Literal["info", "warning", "error"]


class TensorSummary(TypedDict):
    """A tensor: shape, dtype, device, statistics, and its values when it is small."""
    shape: list[int]
    dtype: str
    device: str
    layout: NotRequired[str]
    numel: NotRequired[int]
    nonfinite: NotRequired[int]
    min: NotRequired[Number]
    max: NotRequired[Number]
    mean: NotRequired[Number]
    norm: NotRequired[Number]
    abs_mean: NotRequired[Number]  # mean |x|
    values: NotRequired[Any]  # nested lists of numbers, at most MAX_VALUES of them


class SavedValue(TypedDict):
    name: str
    shape: NotRequired[list[int]]
    dtype: NotRequired[str]
    device: NotRequired[str]
    value: NotRequired[str]
    freed: NotRequired[bool]
    modified: NotRequired[bool]
    version: NotRequired[int]        # its version counter when the pass was recorded
    saved_version: NotRequired[int]  # when saved, where it was changed in place since
    param: NotRequired[str]
    packed: NotRequired[bool]  # kept by a saved_tensors_hooks pack hook: named, not read
    bytes: NotRequired[int]    # the memory behind it (a view: all of its base's)
    storage: NotRequired[int]  # which memory: equal numbers in one pass are one allocation


class SavedMemory(TypedDict):
    """What a pass's graph held for backward, each allocation once (app/trace/saved_memory.py)."""
    held_bytes: int           # no named leaf's memory: kept alive only for backward
    leaf_bytes: int           # a named leaf's (a parameter's): kept anyway
    by_module: dict[str, int]  # held bytes of each module's nodes, each allocation once
    packed_tensors: NotRequired[int]  # taken by a pack hook (a checkpoint): not counted


class ForwardMemory(TypedDict, total=False):
    """The allocator's most and last bytes in the pass's forward (app/trace/forward_memory.py),
    above its total when the forward began; or why they were not measured."""
    device: Literal["cpu", "cuda"]  # cpu: torch's profiler memory events; cuda: torch.cuda's
    peak_bytes: int            # the most held at once, above the forward start's total
    held_bytes: int            # still held when backward was called (may be below: freed)
    line: int | None           # the line of the forward's first recorded operation
    unmeasured: str            # instead of the numbers: why


class BackwardSource(TypedDict):
    file: str
    line: int
    source: str


class DoubleCheck(TypedDict):
    passed: NotRequired[bool | None]
    message: NotRequired[str]


class Gradcheck(TypedDict):
    passed: NotRequired[bool | None]
    message: NotRequired[str]
    double: NotRequired[DoubleCheck]  # gradgradcheck, when backward cut a create_graph graph


class CellLine(TypedDict):
    cell: int  # a notebook kernel's execution count: JupyterLab's [N]
    line: int


class Node(TypedDict):
    id: str
    name: str
    kind: NodeKind
    label: NotRequired[str]
    module: NotRequired[str | None]
    line: NotRequired[int | None]
    # written in another notebook cell than the one traced (a model defined earlier)
    cell_line: NotRequired[CellLine]
    param: NotRequired[str]
    shape: NotRequired[list[int]]
    dtype: NotRequired[str]
    device: NotRequired[str]
    function: NotRequired[str]
    backward_source: NotRequired[BackwardSource | None]
    gradcheck: NotRequired[Gradcheck]
    saved: NotRequired[list[SavedValue]]
    compiled_region: NotRequired[int]  # a CompiledFunctionBackward node: its CompiledRegion's id
    checkpoint: NotRequired[int]  # made in a non-reentrant checkpoint: Graph.checkpoints index


class Edge(TypedDict):
    source: str
    target: str
    slot: int
    shape: NotRequired[list[int]]
    dtype: NotRequired[str]  # the gradient's dtype along it (autocast's casts change it)
    grad_norm: NotRequired[Number | None]


class Cut(TypedDict):
    param: str
    node: str
    source: str | None
    how: NotRequired[str | None]
    line: NotRequired[int | None]


class CheckpointRegion(TypedDict):
    """A non-reentrant checkpoint's region: all it keeps for backward is its inputs."""
    inputs: list[SavedValue]


class Graph(TypedDict):
    nodes: list[Node]
    edges: list[Edge]
    roots: list[str]
    truncated: NotRequired[bool]
    cuts: NotRequired[list[Cut]]
    checkpoints: NotRequired[list[CheckpointRegion]]


class RecomputedForward(TypedDict):
    """A module forward a checkpoint ran again during a backward pass."""
    module: str
    type: str                     # the module's class name
    checkpoint: NotRequired[int]  # a non-reentrant one's region: Graph.checkpoints index
    node: NotRequired[str]        # a reentrant one's CheckpointFunctionBackward node


class Contribution(TypedDict):
    node: str
    slot: int
    grad: TensorSummary


class HookShare(TypedDict):
    """What a leaf's hooks changed in one pass: between its uses' sum and what reached
    AccumulateGrad (`hook`), or in .grad after accumulating (`post-accumulate-grad hook`), or
    on its way out of a module it is the input of (`module backward hook`: a full backward
    hook's change to grad_input)."""
    kind: Literal["hook", "post-accumulate-grad hook", "module backward hook"]
    lines: list[int]
    grad: TensorSummary
    from_norm: NotRequired[float | None]  # the gradient's norm before the hooks, and after
    to_norm: NotRequired[float | None]


class HookCall(TypedDict):
    """One hook of the script's, in one pass (app/trace/hooks.py): how often it ran, how many
    of those calls returned a new gradient, the nodes it ran on."""
    kind: Literal["tensor hook", "post-accumulate-grad hook", "module full backward hook",
                  "module full backward pre-hook", "module backward hook (legacy)"]
    line: int | None  # the line that registered it
    on: str | None  # the tensor or module it was registered on
    nodes: list[str]
    calls: int
    returned: int
    sits_on: NotRequired[str]  # a legacy module hook: the node type it really sits on


class GradChange(TypedDict):
    before: TensorSummary | None
    after: TensorSummary | None


class EventError(TypedDict):
    type: str
    message: str


class GradcheckCall(TypedDict):
    """A gradcheck or gradgradcheck the script called: its verdict and tolerances."""
    check: Literal["gradcheck", "gradgradcheck"]
    passed: bool
    message: str
    eps: NotRequired[float | None]
    atol: NotRequired[float | None]
    rtol: NotRequired[float | None]
    function: str
    line: int | None
    calls: NotRequired[int]  # the checks at this line with this verdict it stands for


class BackwardEvent(TypedDict):
    kind: Literal["backward"]
    index: int
    graph: Graph
    order: list[str]
    uses: dict[str, int]
    contributions: dict[str, list[Contribution]]
    grads: dict[str, GradChange]
    call: NotRequired[str]
    line: NotRequired[int | None]
    synthetic: NotRequired[bool]
    synthetic_reason: NotRequired[str]
    results: NotRequired[list[TensorSummary | None]]
    inputs: NotRequired[list[str]]       # autograd.grad's inputs: results[i] is inputs[i]'s
    error: NotRequired[EventError | None]
    create_graph: NotRequired[bool]
    gradient_view: NotRequired[int]      # index in Trace.views: the gradients' own graph
    no_graph: NotRequired[list[str]]     # gradients with no grad_fn despite create_graph
    cut_by: NotRequired[list[str]]       # custom Function nodes whose backward cut it
    # leaves whose requires_grad was switched off after the forward: AccumulateGrad dropped
    # what their uses sent, and .grad kept what it had
    dropped: NotRequired[list[str]]
    # leaves whose .grad changed through no recorded use: a backward torch ran inside this
    # one (a reentrant checkpoint's); `nested` counts those backward passes
    inner: NotRequired[list[str]]
    nested: NotRequired[int]
    recomputed: NotRequired[list[RecomputedForward]]  # a checkpoint's forward, run again
    # the gradient each root started from (backward(gradient=...)); absent: autograd's 1
    seed: NotRequired[list[TensorSummary | None]]
    gradcheck: NotRequired[GradcheckCall]  # the script's check this pass stands for
    hooks: NotRequired[dict[str, list[HookShare]]]  # uses + shares = what .grad gained
    saved_memory: NotRequired[SavedMemory]
    forward_memory: NotRequired[ForwardMemory]
    hook_calls: NotRequired[list[HookCall]]  # every call of the script's hooks in the pass


class StepCheck(TypedDict):
    """A step recomputed by its optimizer's documented rule (app/trace/optimizer_rules.py) from
    copies taken before it, against the change PyTorch made."""
    rule: Literal["SGD", "Adam", "AdamW"]
    matches: NotRequired[bool]
    # why it was not checked: no .grad (the step skipped it), too many weights to copy, or a
    # setting the rule cannot use (a NaN learning rate)
    unchecked: NotRequired[Literal["no_grad", "too_large", "cannot_apply", "closure"]]
    largest_difference: NotRequired[float | None]
    expected_change_norm: NotRequired[float | None]
    observed_change_norm: NotRequired[float | None]


class StepChange(TypedDict):
    before: TensorSummary
    after: TensorSummary
    grad: NotRequired[TensorSummary | None]
    group: NotRequired[int]  # its parameter group: the step's `settings[group]`
    state: NotRequired[dict]  # what the optimizer held for it before: step, which buffers
    check: NotRequired[StepCheck | None]


class StepEvent(TypedDict):
    kind: Literal["step"]
    index: int
    optimizer: str
    params: dict[str, StepChange]
    line: NotRequired[int | None]
    lr: NotRequired[list[float | None]]
    settings: NotRequired[list[dict]]  # each parameter group's settings (lr, momentum, betas…)
    scaler: NotRequired[dict]  # {"scale", "unscaled_first"?}: each .grad divided by it just before


Event = BackwardEvent | StepEvent


class Param(TypedDict):
    shape: list[int]
    dtype: str
    device: str
    requires_grad: bool
    kind: NotRequired[Literal["parameter", "leaf"]]
    module: NotRequired[str | None]
    uses: NotRequired[dict[str, int]]  # backward event index -> uses in that graph
    grad: NotRequired[TensorSummary | None]


class Edit(TypedDict):
    """One line of the script, as it is and as the fix has it (several lines for an insert)."""
    line: int
    before: str
    after: str


class FixTried(TypedDict):
    """The fix's edited script, run in the sandbox with the run's limits (fix_trial.py)."""
    ran: bool
    why: NotRequired[str]  # why it did not run (its edits do not match the script)
    error: NotRequired[str | None]  # the error it stopped with; None: it ran to the end
    message: NotRequired[str | None]
    backwards: NotRequired[int]  # backward passes it made


class Fix(TypedDict):
    say: str
    edits: list[Edit]
    tried: NotRequired[FixTried]


class Explanation(TypedDict):
    """An autograd failure explained (app/trace/failures.py)."""
    code: str            # stable per kind; "unrecognised" when the explainer does not know it
    what: str | None
    line: int | None     # the line that made the problem, not only where it surfaced
    nodes: list[str]
    event: int | None
    fix: Fix | None
    scenario: str | None   # the built-in scenario that teaches it


class Diagnostic(TypedDict):
    code: str
    level: DiagnosticLevel
    message: str
    params: list[str]
    nodes: list[str]
    event: NotRequired[int | None]
    explanation: NotRequired[Explanation]


class ErrorRecord(TypedDict):
    """What went wrong, in words a person can act on, and the script's line."""
    type: str
    message: str
    line: int | None
    frames: NotRequired[list[dict[str, Any]]]
    log: NotRequired[str]
    exception: NotRequired[str]
    explanation: NotRequired[Explanation]


class NotebookCell(TypedDict):
    cell: int   # its place among all the notebook's cells, from 1
    first: int  # the script lines it occupies
    last: int


class SkippedLine(TypedDict):
    cell: int
    line: int   # in its cell, from 1
    text: str
    lines: NotRequired[int]  # skipped with it: a cell magic's whole cell, continued lines
    ran: NotRequired[bool]   # a %time/%%time: what it wraps ran, without the magic


class NotebookPart(TypedDict):
    """An uploaded notebook (set by the server, app/format/notebook.py)."""
    name: str
    cells: list[NotebookCell]
    skipped: list[SkippedLine]
    skipped_count: int


class Script(TypedDict):
    name: str
    sha256: str
    source: str
    args: NotRequired[list[str]]
    notebook: NotRequired[NotebookPart]


class EventsSkipped(TypedDict):
    backward: NotRequired[int]
    step: NotRequired[int]


class RunLink(TypedDict):
    id: str
    link: str


class Figure(TypedDict):
    """A matplotlib figure the script made, as a PNG (base64), and where it was shown."""
    index: int
    via: Literal["show", "savefig", "open at the end"]
    line: int | None
    width: int
    height: int
    png: str


class ViewMatch(TypedDict):
    event: int
    shared: int
    nodes: int


class View(TypedDict):
    """A graph the script asked to see: a torchviz.make_dot call, or the graph a create_graph
    gradient carries."""
    index: int
    kind: Literal["make_dot", "gradient", "manual_nodes", "func_forward"]
    call: str
    line: int | None
    event: int | None
    label: str
    names: list[str]
    graph: Graph
    matches: NotRequired[ViewMatch]


class FxOp(TypedDict):
    id: str              # the FX node's name, shared with the joint graph
    op: str              # its ATen target, e.g. aten.addmm.default
    inputs: list[str]    # the nodes it reads: ops, primals_N, tangents_N, saved values


class FxGraph(TypedDict):
    ops: list[FxOp]
    op_count: int
    inputs: list[str]    # its placeholders
    truncated: NotRequired[bool]


class SavedForBackward(TypedDict):
    name: str
    op: NotRequired[str]          # the forward op that made it, or "input"
    kind: NotRequired[Literal["tensor", "symint"]]
    shape: NotRequired[list[int]]
    dtype: NotRequired[str]


class RecomputedOp(TypedDict):
    id: str
    op: str


class CompiledRegion(TypedDict):
    """What AOTAutograd made of one torch.compile region (app/trace/compiled_graphs.py)."""
    id: int                       # aot_id, a CompiledFunctionBackward node's compiled_region
    forward: FxGraph | None
    backward: FxGraph | None      # None: its backward never ran, so was never compiled
    saved: NotRequired[list[SavedForBackward]]
    saved_count: NotRequired[int]
    recomputed: NotRequired[list[RecomputedOp]]


class Trace(TypedDict):
    """One run of one script: its backward passes and optimizer steps, the graphs they walked,
    and what a teacher would point at."""
    format: Literal["autograd-lab/trace@1"]
    script: Script
    torch: str | None
    device: str
    events: list[Event]
    params: dict[str, Param]
    diagnostics: list[Diagnostic]
    stdout: str
    error: ErrorRecord | None
    stderr: NotRequired[str]
    events_skipped: NotRequired[EventsSkipped]
    elapsed: NotRequired[float]          # set by the runner
    output_dropped: NotRequired[int]     # set by the runner: raw output bytes not kept
    sandbox: NotRequired[dict[str, Any]]  # set by the runner: which layers held
    run: NotRequired[RunLink]            # set by the server for a stored run
    figures: NotRequired[list[Figure]]   # matplotlib figures, in the order they were made
    views: NotRequired[list[View]]       # make_dot calls and create_graph gradients' graphs
    compiled_regions: NotRequired[list[CompiledRegion]]  # AOTAutograd's graphs per region
