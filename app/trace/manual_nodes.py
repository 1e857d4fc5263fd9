"""Autograd nodes the script calls by hand (`y.grad_fn(g)`, `fn.next_functions[0][0](g)`).

Such a call computes one node's gradient and no pass: a script that makes only these calls is
shown as what it did (the graph its nodes belong to, as a view, and a note naming the lines),
never as a backward pass autograd-lab ran itself from a gradient of its own choosing.

Node objects are C++ types whose `__call__` cannot be patched, so the calls are found in the
script's source: a call whose callee is `X.grad_fn`, `X.next_functions[i][0]`, or a name bound
(anywhere in the script, by `=` or a `for` over `.next_functions`) to one of those. Not caught:
a node passed into a function under another name (`def step(node, g): node(g)`), nodes reached
through `getattr` or containers of the script's own, and `node.__call__(g)`. A call that is in
the source but never ran is still named.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

import torch

from app.format import Diagnostic, diagnostic

__all__ = ["HandCalls"]

MAX_ROOTS = 3  # distinct tensors whose graphs are drawn
MAX_SEARCH = 20_000  # nodes searched for a node the script holds, per tensor


@dataclass
class HandCalls:
    """The lines that call nodes by hand, and the tensors (by script name) they came from."""
    lines: list[int] = field(default_factory=list)
    bases: list[str] = field(default_factory=list)  # `y` of `y.grad_fn(...)`, in call order
    holders: list[str] = field(default_factory=list)  # names bound to a node (`fn = y.grad_fn`)
    views: list[int] = field(default_factory=list)  # the views drawn for them

    @classmethod
    def in_source(cls, source: str) -> HandCalls:
        # the script's own compile() says what is wrong with a source that fails here (too
        # deep: `1+1+...` of 5000 terms is a RecursionError, or a MemoryError, in the parser):
        # its run has its error record, and no calls by hand to name
        try:
            return _Finder(ast.parse(source)).found()
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return cls()

    def __bool__(self) -> bool:
        return bool(self.lines)

    def show(self, recorder: Any, namespace: dict) -> None:
        """No backward ran: draw the graph the called nodes belong to, each root once."""
        recorder.namer.finished_globals = namespace
        try:
            for root, label in _roots(self, namespace)[:MAX_ROOTS]:
                index = recorder.views.drawn(
                    "manual_nodes", "grad_fn()", self.lines[0],
                    f"the graph of {label}, whose nodes the script calls by hand",
                    [(root, label)])
                if index is not None:
                    self.views.append(index)
        except Exception as exc:  # noqa: BLE001 - the note is said with or without its picture
            recorder._internal_error("drawing the graph of nodes called by hand", exc)

    def notes(self, backward_ran: bool) -> list[Diagnostic]:
        if not self.lines:
            return []
        where = _said_lines(self.lines)
        if backward_ran:
            tail = ("outside any backward pass; the passes drawn are the script's own "
                    "backward() and grad() calls.")
        else:
            tail = "no backward pass ran, so none is drawn" + (
                "; the graph they belong to is shown as a view (under \"Graphs the script "
                "drew\")." if self.views else ".")
        return [diagnostic(
            "manual_nodes", "info",
            f"The script calls autograd nodes by hand {where}: each call computes one node's "
            f"gradient, {tail}")]


def _said_lines(lines: list[int]) -> str:
    if len(lines) == 1:
        return f"at line {lines[0]}"
    shown = [str(n) for n in lines[:10]]
    more = " ..." if len(lines) > 10 else ""
    return "at lines " + ", ".join(shown[:-1]) + f" and {shown[-1]}" + more


class _Finder:
    """Names bound to nodes, to `.next_functions` tuples and to their (node, index) pairs;
    each name's base (the script variable whose `.grad_fn` it came from) where known."""

    def __init__(self, tree: ast.AST) -> None:
        self.tree = tree
        self.nodes: dict[str, str | None] = {}
        self.lists: dict[str, str | None] = {}
        self.pairs: dict[str, str | None] = {}

    def found(self) -> HandCalls:
        for _ in range(5):  # chains of names (`fn = y.grad_fn; nxt = fn.next_functions`)
            before = (len(self.nodes), len(self.lists), len(self.pairs))
            for stmt in ast.walk(self.tree):
                if isinstance(stmt, ast.Assign):
                    for target in stmt.targets:
                        self._bind(target, stmt.value)
                elif isinstance(stmt, (ast.AnnAssign, ast.NamedExpr)) and stmt.value is not None:
                    self._bind(stmt.target, stmt.value)
                elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.comprehension)):
                    self._bind_loop(stmt.target, stmt.iter)
            if before == (len(self.nodes), len(self.lists), len(self.pairs)):
                break
        calls = HandCalls()
        for call in ast.walk(self.tree):
            if isinstance(call, ast.Call):
                is_node, base = self._node(call.func)
                if not is_node:
                    continue
                if call.lineno not in calls.lines:
                    calls.lines.append(call.lineno)
                if base and base not in calls.bases:
                    calls.bases.append(base)
                if isinstance(call.func, ast.Name) and call.func.id not in calls.holders:
                    calls.holders.append(call.func.id)
        calls.lines.sort()
        return calls

    def _bind(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Name):
            is_node, base = self._node(value)
            if is_node:
                self.nodes.setdefault(target.id, base)
            elif (found := self._next_functions(value)) is not None:
                self.lists.setdefault(target.id, found[0])
            elif (found := self._pair(value)) is not None:
                self.pairs.setdefault(target.id, found[0])
        elif isinstance(target, (ast.Tuple, ast.List)) and target.elts:
            found = self._pair(value)  # `fn, _ = y.grad_fn.next_functions[0]`
            if found is not None and isinstance(target.elts[0], ast.Name):
                self.nodes.setdefault(target.elts[0].id, found[0])

    def _bind_loop(self, target: ast.AST, iterable: ast.AST) -> None:
        found = self._next_functions(iterable)
        if found is None:
            return
        if isinstance(target, ast.Name):
            self.pairs.setdefault(target.id, found[0])
        elif isinstance(target, (ast.Tuple, ast.List)) and target.elts and \
                isinstance(target.elts[0], ast.Name):
            self.nodes.setdefault(target.elts[0].id, found[0])

    def _node(self, e: ast.AST) -> tuple[bool, str | None]:
        """Is `e` a node, and the variable whose graph it is in (when known)."""
        if isinstance(e, ast.Attribute) and e.attr == "grad_fn":
            return True, e.value.id if isinstance(e.value, ast.Name) else None
        if isinstance(e, ast.Name) and e.id in self.nodes:
            return True, self.nodes[e.id]
        if isinstance(e, ast.Subscript) and _index(e) == 0:  # (node, input_nr)[0]
            found = self._pair(e.value)
            if found is not None:
                return True, found[0]
        return False, None

    def _next_functions(self, e: ast.AST) -> tuple[str | None] | None:
        if isinstance(e, ast.Attribute) and e.attr == "next_functions":
            return (self._node(e.value)[1],)
        if isinstance(e, ast.Name) and e.id in self.lists:
            return (self.lists[e.id],)
        return None

    def _pair(self, e: ast.AST) -> tuple[str | None] | None:
        if isinstance(e, ast.Subscript):
            return self._next_functions(e.value)
        if isinstance(e, ast.Name) and e.id in self.pairs:
            return (self.pairs[e.id],)
        return None


def _index(e: ast.Subscript) -> int | None:
    s = e.slice
    return s.value if isinstance(s, ast.Constant) and isinstance(s.value, int) else None


def _roots(calls: HandCalls, namespace: dict) -> list[tuple[torch.Tensor, str]]:
    """The tensors whose graphs hold the called nodes: the variables they came from, else a
    module-level tensor whose graph holds a node the script still holds, else its last
    module-level tensor with a grad_fn."""
    roots: list[tuple[torch.Tensor, str]] = []

    def add(t: torch.Tensor, label: str) -> None:
        if not any(t is r for r, _ in roots):
            roots.append((t, label))

    for name in calls.bases:
        value = namespace.get(name)
        if isinstance(value, torch.Tensor) and value.grad_fn is not None:
            add(value, name)
    tensors = [(v, k) for k, v in namespace.items() if isinstance(v, torch.Tensor)
               and v.grad_fn is not None and not k.startswith("_")]
    held = [namespace[n] for n in calls.holders if n in namespace
            and not isinstance(namespace[n], torch.Tensor)]
    for node in held:
        for t, label in tensors:
            if _holds(t.grad_fn, node):
                add(t, label)
                break
    if not roots and tensors:
        add(*tensors[-1])
    return roots


def _holds(fn: Any, wanted: Any) -> bool:
    seen, stack = {fn}, [fn]
    while stack and len(seen) < MAX_SEARCH:
        node = stack.pop()
        if node is wanted:
            return True
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False
