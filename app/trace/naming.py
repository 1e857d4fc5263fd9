"""Names for the tensors a graph reaches: `middle_linear.weight`, not an address.

Parameters are named by the modules that own them (`named_parameters()` of each outermost
module the script holds or calls); other leaves by the script variable that holds them. A name,
once given, stays with its tensor for the whole run, so events can be compared.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from . import _internals as internals

__all__ = ["Namer", "script_frames"]


def script_frames(script_path: str) -> Iterator[Any]:
    """Frames of the running script, innermost first."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == script_path:
            yield frame
        frame = frame.f_back


class Namer:
    def __init__(self, script_path: str) -> None:
        self.script_path = script_path
        self._by_id: dict[int, tuple[torch.Tensor, str, str]] = {}
        self._taken: set[str] = set()
        self._top_modules: list[weakref.ref] = []
        # a model's parameter names start with this ("" when the script has one model)
        self._prefixes: dict[int, str] = {}
        # once the script has finished there are no frames to look in: its globals stay
        self.finished_globals: dict | None = None
        # copies named as the tensors they stand for, while a pass on them is recorded
        self._stand_ins: dict[int, tuple[torch.Tensor, str, str]] = {}
        self._read_frames = True  # off while autograd-lab calls the script's code (scratch)

    # -- what the script holds -------------------------------------------------------------
    def saw_top_level_call(self, module: nn.Module) -> None:
        """A module was called with no other module around it: a model the script runs."""
        if not any(ref() is module for ref in self._top_modules):
            self._top_modules.append(weakref.ref(module))

    def variables(self) -> list[tuple[str, Any]]:
        """(name, value) of the script's variables, innermost frame first, globals last."""
        out: list[tuple[str, Any]] = []
        for frame in script_frames(self.script_path) if self._read_frames else ():
            out.extend(frame.f_locals.items())
        if self.finished_globals is not None:
            out.extend(self.finished_globals.items())
        return out

    def variable_name_of(self, obj: Any) -> str | None:
        for name, value in self.variables():
            if value is obj and not name.startswith("_"):
                return name
        return None

    # -- naming ----------------------------------------------------------------------------
    def refresh(self) -> None:
        """Name every parameter of the script's models and every leaf variable it holds."""
        variables = self.variables()
        candidates: list[tuple[str, nn.Module]] = []
        seen: set[int] = set()
        compiled: list[tuple[nn.Module, nn.Module]] = []  # (torch.compile's wrapper, model)

        def add(name: str, module: nn.Module) -> None:
            # a compiled model (`torch.compile(model)`) is named as the model it wraps: its
            # parameters are `0.weight`, not `_orig_mod.0.weight`
            original = internals.compiled_original(module)
            if original is not None:
                compiled.append((module, original))
                seen.add(id(module))
                module = original
            if id(module) not in seen:
                candidates.append((name, module))
                seen.add(id(module))

        for name, value in variables:
            if isinstance(value, nn.Module) and id(value) not in seen and not name.startswith("_"):
                add(name, value)
        for ref in self._top_modules:
            module = ref()
            if module is not None and id(module) not in seen:
                add(type(module).__name__.lower(), module)
        inner: set[int] = set()
        for _, module in candidates:
            inner.update(id(m) for m in module.modules() if m is not module)
        roots = [(n, m) for n, m in candidates if id(m) not in inner]
        with_params = [(n, m) for n, m in roots if any(True for _ in m.parameters())]
        for root_name, module in with_params:
            prefix = "" if len(with_params) == 1 else root_name + "."
            self._prefixes[id(module)] = prefix
            for pname, p in module.named_parameters():
                # under torch.func.functional_call inside a transform, the module holds the
                # transform's wrappers of the script's tensors for the call: not its own
                if not internals.is_transform_wrapper(p):
                    self._assign(p, prefix + pname, "parameter")
        for wrapper, original in compiled:  # its calls' ops go with the model's parameters
            if id(original) in self._prefixes:
                self._prefixes[id(wrapper)] = self._prefixes[id(original)]
        for name, value in variables:
            # a transform's wrapper (`x` inside `jacrev(f)(x)`) stands for a tensor of the
            # script's that may not even require grad: never named as one of its own
            if (isinstance(value, torch.Tensor) and value.is_leaf and value.requires_grad
                    and not name.startswith("_") and not internals.is_transform_wrapper(value)):
                kind = "parameter" if isinstance(value, nn.Parameter) else "leaf"
                self._assign(value, name, kind)

    def name(self, tensor: torch.Tensor) -> tuple[str, str]:
        """(name, kind) of a leaf; one not found in the script gets a numbered name."""
        known = self._by_id.get(id(tensor)) or self._stand_ins.get(id(tensor))
        if known is not None and known[0] is tensor:
            return known[1], known[2]
        kind = "parameter" if isinstance(tensor, nn.Parameter) else "leaf"
        # a leaf the script holds whose requires_grad it switched off (refresh names only
        # those that require grad): its own variable's name, not a number
        held = self.variable_name_of(tensor) if tensor.is_leaf else None
        if held is not None and held not in self._taken:
            return self._assign(tensor, held, kind)
        return self._assign(tensor, "param" if kind == "parameter" else "leaf", kind, number=True)

    def _assign(self, tensor: torch.Tensor, name: str, kind: str, number: bool = False):
        known = self._by_id.get(id(tensor))
        if known is not None and known[0] is tensor:
            return known[1], known[2]
        # a copy standing in for the script's tensor (standing_in) is found by a refresh when
        # the function called on it holds it in a variable: it keeps its original's name, and
        # is never named as a tensor of the script's own (`inp#2` in params, a no_gradient)
        stand_in = self._stand_ins.get(id(tensor))
        if stand_in is not None and stand_in[0] is tensor:
            return stand_in[1], stand_in[2]
        unique = name if not number and name not in self._taken else None
        i = 0 if number else 2
        while unique is None:
            candidate = f"{name}{i}" if number else f"{name}#{i}"
            if candidate not in self._taken:
                unique = candidate
            i += 1
        self._by_id[id(tensor)] = (tensor, unique, kind)
        self._taken.add(unique)
        return unique, kind

    @contextlib.contextmanager
    def standing_in(self, copies: list[tuple[torch.Tensor, torch.Tensor, int]]):
        """Each (copy, original, position among the call's inputs, from 1): the copy is named
        as its named original inside the block, and only there (gradcheck's pass runs on
        copies of the script's `x`: its graph says `x`, while `named()` and every later pass
        keep the script's own tensor). One tensor given twice is two inputs: its first copy is
        `x`, the next `x (input 2)`, so their gradients are not summed under one name. An
        original the script holds under no name is `input 2`, by its place in the call."""
        seen: set[int] = set()
        for copy, original, position in copies:
            known = self._by_id.get(id(original))
            if known is None or known[0] is not original:
                name = f"input {position}"
                kind = "parameter" if isinstance(original, nn.Parameter) else "leaf"
            elif id(original) in seen:
                name, kind = f"{known[1]} (input {position})", known[2]
            else:
                name, kind = known[1], known[2]
            seen.add(id(original))
            self._stand_ins[id(copy)] = (copy, name, kind)
        try:
            yield
        finally:
            self._stand_ins.clear()

    @contextlib.contextmanager
    def scratch(self, namespace: dict):
        """While autograd-lab calls the script's code itself after the script has ended (a
        torch.func function drawn on copies, gradcheck on float64 inputs): the tensors it
        makes are ours, never the script's. Names given inside are kept only inside (a view
        drawn there uses them), and the script's frames, which are then our calls' (their
        locals our copies), are not read; its globals (`namespace`) still name what it holds.
        Tensors named before keep their names."""
        saved = self._by_id, self._taken, self.finished_globals, self._read_frames
        self._by_id, self._taken = dict(self._by_id), set(self._taken)
        self.finished_globals, self._read_frames = namespace, False
        try:
            yield
        finally:
            self._by_id, self._taken, self.finished_globals, self._read_frames = saved

    # -- what is known ---------------------------------------------------------------------
    def named(self) -> dict[str, tuple[torch.Tensor, str]]:
        """Every named tensor: name -> (tensor, kind)."""
        return {name: (t, kind) for t, name, kind in self._by_id.values()}

    def in_called_module(self, tensor: torch.Tensor) -> bool:
        """Is `tensor` a parameter of a module the code called (itself or one holding it)?"""
        return any(p is tensor for ref in self._top_modules if (m := ref()) is not None
                   for p in m.parameters())

    def module_prefix(self, module: nn.Module) -> str | None:
        """What the names of `module`'s parameters start with ("" or "model."), so that the
        module paths of its ops match them; None for a model with no parameters."""
        return self._prefixes.get(id(module))

    def module_of(self, param_name: str) -> str | None:
        return param_name.rsplit(".", 1)[0] if "." in param_name else None
