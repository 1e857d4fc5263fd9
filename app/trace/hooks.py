"""Every call of the script's hooks, counted per backward pass.

`intercept.py` hands each hook the script registers (tensor hooks, post-accumulate-grad hooks,
modules' full backward hooks and pre-hooks, and the legacy `register_backward_hook`) to
`counting`, and registers what it returns instead. The wrapper calls the hook with exactly
what it was given and gives back exactly what the hook returned or raised: the script's
semantics are PyTorch's. While a pass is recorded it also tells the pass's `HookCalls` that the
hook ran, whether it returned something (a new gradient) or None, and on which node of the
graph the engine was running it: for the legacy module hook that node is the one the hook
really sits on, the module's last operation, not the module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["HookCalls", "counting"]

MAX_CALLED = 200  # distinct hooks a pass records
MAX_NODES = 20  # nodes one hook is recorded on (a module called many times in one forward)
# torch's name for the engine's current node; only read while a recorded pass runs
_current_node = torch._C._current_autograd_node

# what the page calls each kind of hook, by the registering call
KINDS = {
    "register_hook": "tensor hook",
    "register_post_accumulate_grad_hook": "post-accumulate-grad hook",
    "register_full_backward_hook": "module full backward hook",
    "register_full_backward_pre_hook": "module full backward pre-hook",
    "register_backward_hook": "module backward hook (legacy)",
}


def counting(hook: Any, registration: Any, recording: Callable[[], Any]) -> Callable:
    """`hook`, counted: `recording()` is the pass being recorded now, or None."""

    def counted(*args, **kwargs):
        result = None
        try:
            result = hook(*args, **kwargs)
            return result
        finally:
            # the count is the tracer's; it never replaces what the hook returned or raised
            try:
                calls = recording()
                if calls is not None:
                    # a hook that raised is counted too: it ran, and the pass failed in it
                    calls.hook_calls.called(registration, result is not None)
            except Exception:  # noqa: BLE001, S110 - a lost count, not a changed script
                pass

    try:
        functools.update_wrapper(counted, hook)
    except (AttributeError, TypeError):  # a callable object without a name: nothing to copy
        pass
    return counted


class HookCalls:
    """One pass's tally: registration -> [node ids it ran on, calls, calls that returned a
    value]; `node_of` maps a grad_fn of the walked graph to its node id."""

    def __init__(self, node_of: Callable[[Any], str | None]) -> None:
        self._node_of = node_of
        self._tally: dict[int, tuple[Any, list]] = {}

    def called(self, registration: Any, returned: bool) -> None:
        entry = self._tally.get(id(registration))
        if entry is None:
            if len(self._tally) >= MAX_CALLED:
                return
            entry = self._tally[id(registration)] = (registration, [[], 0, 0])
        tally = entry[1]
        tally[1] += 1
        tally[2] += int(returned)
        if len(tally[0]) < MAX_NODES:
            try:
                node = self._node_of(_current_node())
            except Exception:  # noqa: BLE001 - where it ran is a detail; the count stands
                node = None
            if node is not None and node not in tally[0]:
                tally[0].append(node)

    def records(self, target: Callable[[Any], str | None],
                node_name: Callable[[str], str | None]) -> list[dict]:
        """The pass's hook calls in the order the hooks first ran, as the Trace keeps them."""
        out = []
        for registration, (nodes, calls, returned) in self._tally.values():
            record = {"kind": registration.kind, "line": registration.line,
                      "on": (target(registration) or "")[:200] or None, "nodes": nodes,
                      "calls": calls, "returned": returned}
            if registration.kind == KINDS["register_backward_hook"] and nodes:
                record["sits_on"] = node_name(nodes[0])
            out.append(record)
        return out
