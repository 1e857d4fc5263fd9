"""Where the script took values out of the graph, and which graph nodes show it.

Two things are noted while the script runs (the recorder calls `note_escape` and `note_cut`):
- an *escape*: a leaf read in a way that hands out its values without a link to the graph
  (`.data`, `detach()`, under `no_grad`/`inference_mode`, after `requires_grad_(False)`);
- a *cut*: a computed tensor detached or used under no_grad, so what it was computed from gets
  no gradient through that path.

When a backward pass is recorded, `find_cuts` names the nodes that saved a parameter's values
but have no edge from it: the script cut the gradient there, and the page draws it dashed.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from app.format.types import Cut

from .graph import Walk, grad_fn_reaches, reaches_within_statement

__all__ = ["Escape", "CutLog", "find_cuts"]

MAX_CUTS = 50            # cuts kept: each holds a grad_fn alive
MAX_ESCAPES_PER_LEAF = 20
MAX_COPIES = 10_000    # deep-copied leaves remembered
MAX_DRAWN_CUTS = 1000  # dashed edges listed per graph (the schema allows 10,000)


@dataclass
class Escape:
    """A leaf read in a way that leaves the graph: `.data`, `detach()`, or under no_grad."""
    how: str
    line: int


class CutLog:
    """The escapes and cuts the script made, for the diagnostics and the dashed edges."""

    def __init__(self) -> None:
        self._escapes: dict[int, tuple[torch.Tensor, list[Escape]]] = {}
        # (grad_fn, how, line) where a computed tensor left the graph: detach() or no_grad
        self._cuts: list[tuple[Any, str, int]] = []
        # leaves deep-copied by the script (id -> (leaf, line, its copy once known)): the
        # copies train, not they
        self._copies: dict[int, tuple[torch.Tensor, int, Any]] = {}
        # (leaf, deepcopy's memo) until the copy is in the memo: deepcopy puts it there once
        # the leaf's __deepcopy__ returns, after the .data read that noted it
        self._pending: list[tuple[torch.Tensor, dict]] = []
        # every escape and cut, in the order the script made them: (how, line)
        self.history: list[tuple[str, int]] = []

    def note_escape(self, tensors: Iterable[Any], how: str, line: Callable[[], int | None],
                    switched_off: bool = False) -> None:
        """Leaves among `tensors` were read `how` at the script's `line()` (asked only when
        there is one). requires_grad_(False) is seen after it ran: the leaf no longer requires
        grad, hence `switched_off`."""
        leaves = [a for a in tensors if isinstance(a, torch.Tensor) and a.is_leaf
                  and (a.requires_grad or switched_off)]
        if not leaves:
            return
        at = line()
        if at is None:
            return
        for t in leaves:
            entry = self._escapes.setdefault(id(t), (t, []))
            if entry[0] is not t:  # an id reused by a new tensor
                entry = self._escapes[id(t)] = (t, [])
            found = entry[1]
            if len(found) < MAX_ESCAPES_PER_LEAF and \
                    not any(e.how == how and e.line == at for e in found):
                found.append(Escape(how, at))
        self._remember(how, at)

    def note_copy(self, tensors: Iterable[Any], line: Callable[[], int | None],
                  memo: dict | None = None) -> None:
        """Leaves among `tensors` were deep-copied at the script's `line()`: the copies are new
        leaves, and the original is left as it was (it may never be used). `memo` is the
        deepcopy's: the copy is found in it once made (`resolve_copies`)."""
        self.resolve_copies()
        leaves = [a for a in tensors if isinstance(a, torch.Tensor) and a.is_leaf
                  and a.requires_grad]
        at = line() if leaves else None
        if at is None:
            return
        for t in leaves:
            if len(self._copies) >= MAX_COPIES:
                return  # each holds its leaf alive: a loop copying fresh models stops here
            if id(t) not in self._copies or self._copies[id(t)][0] is not t:
                self._copies[id(t)] = (t, at, None)
                if isinstance(memo, dict):
                    self._pending.append((t, memo))

    def resolve_copies(self) -> None:
        """Note each copy that deepcopy has made by now (a weak reference: the script keeps
        the copies it wants) and let go of the memos, which hold whole copied models."""
        if not self._pending:
            return
        waiting = []
        for t, memo in self._pending:
            made = memo.get(id(t))
            if made is None:
                waiting.append((t, memo))
            elif isinstance(made, torch.Tensor) and self._copies.get(id(t), (None,))[0] is t:
                self._copies[id(t)] = (t, self._copies[id(t)][1], weakref.ref(made))
        self._pending = waiting

    def copied_at(self, tensor: torch.Tensor) -> int | None:
        entry = self._copies.get(id(tensor))
        return entry[1] if entry is not None and entry[0] is tensor else None

    def copy_of(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """The copy deepcopy made of `tensor`, while the script keeps it."""
        self.resolve_copies()
        entry = self._copies.get(id(tensor))
        if entry is None or entry[0] is not tensor or entry[2] is None:
            return None
        return entry[2]()

    def note_cut(self, tensors: Iterable[Any], how: str, line: Callable[[], int | None],
                 keep: bool = True) -> None:
        """Computed tensors among `tensors` leave the graph `how` at `line()`. Only a few are
        kept: each holds its graph alive. Not `keep`: the line only, for failures.py (a cut
        past the recorded passes draws no dashed edge, but may explain a failure)."""
        if keep and len(self._cuts) >= MAX_CUTS:
            return
        fns = [a.grad_fn for a in tensors if isinstance(a, torch.Tensor)
               and a.grad_fn is not None]
        at = line() if fns else None
        if at is not None:
            if keep:
                self._cuts.extend((fn, how, at) for fn in fns)
            self._remember(how, at)

    def note_value_escape(self, how: str, line: int) -> None:
        """Values of a tensor with a graph taken out `how` at `line` (recorder.py
        `_note_value_escape`): kept in the history, for failures.py to name."""
        self._remember(how, line)

    def _remember(self, how: str, line: int) -> None:
        if (how, line) not in self.history[-5:] and len(self.history) < 4 * MAX_CUTS:
            self.history.append((how, line))

    def escapes_of(self, tensor: torch.Tensor) -> list[Escape]:
        entry = self._escapes.get(id(tensor))
        return entry[1] if entry is not None and entry[0] is tensor else []

    def cuts_above(self, tensor: torch.Tensor, max_nodes: int = 20_000) -> list[Escape]:
        """Where the script cut off a graph that reaches `tensor`."""
        found: list[Escape] = []
        for fn, how, line in self._cuts:
            if any(e.how == how and e.line == line for e in found):
                continue
            if grad_fn_reaches(fn, tensor, max_nodes):
                found.append(Escape(how, line))
        return found


def find_cuts(walk: Walk, tracked: dict[str, torch.Tensor],
              escapes_of: Callable[[torch.Tensor], list[Escape]] | None) -> list[Cut]:
    """Nodes that saved a named leaf's values but have no edge from it: the script cut the
    gradient there (detach(), .data, requires_grad_(False)). Each is drawn dashed."""
    if walk.truncated:
        return []  # edges are missing: every saved parameter would look cut
    node_of = {name: node_id for node_id, (_t, name) in walk.leaves.items()}
    inputs: dict[str, list[str]] = {}
    for e in walk.edges:
        inputs.setdefault(e["target"], []).append(e["source"])
    by_id = {n["id"]: n for n in walk.nodes}
    cuts: list[Cut] = []
    for node in walk.nodes:
        if len(cuts) >= MAX_DRAWN_CUTS:
            break
        for name in sorted({s["param"] for s in node.get("saved", ()) if "param" in s}):
            source = node_of.get(name)
            if source is not None and reaches_within_statement(node, source, inputs, by_id):
                continue
            how, line = None, None
            escapes = escapes_of(tracked[name]) if escapes_of and name in tracked else []
            if escapes:
                # the escape on the node's own line, else the latest one before it
                chosen = next((e for e in escapes if e.line == node.get("line")), escapes[-1])
                how, line = chosen.how, chosen.line
            cuts.append({"param": name, "node": node["id"], "source": source,
                         "how": how, "line": line})
    return cuts
