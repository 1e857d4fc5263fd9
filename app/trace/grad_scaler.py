"""What `torch.amp.GradScaler` did to each optimizer step: the scale the gradients carried, and
the steps it skipped.

Mixed precision scales the loss before backward (`scaler.scale(loss)`: the whole backward carries
gradients `scale` times too big, so small float16 ones do not underflow), then `scaler.step`
divides each `.grad` by the scale (unless the script's `scaler.unscale_` already did: then
`unscaled_first`) and calls `optimizer.step()` only where every gradient is finite;
`scaler.update()` then lowers the scale after a skipped step (and raises it after a run of good
ones). A skipped step leaves no step event at all, so without this the page would say
nothing of a step the script wrote. The scales are the scaler's own (`get_scale()`), the skip is
`optimizer.step()` not having run.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch

from app.format import diagnostic

__all__ = ["ScalerWatch"]

MAX_NOTES = 100  # skipped steps said, per run


def _unscaled_already(scaler, optimizer) -> bool:
    """Had the script called `scaler.unscale_(optimizer)` since the last step (to clip the
    gradients, as PyTorch's AMP examples do)? Then `.grad` is divided already, and
    `scaler.step` does not divide it again. Read without adding the optimizer to the scaler's
    states (a defaultdict)."""
    try:
        from torch.amp.grad_scaler import OptState

        state = scaler._per_optimizer_states.get(id(optimizer))
        return bool(state) and state.get("stage") is OptState.UNSCALED
    except Exception:  # noqa: BLE001 - a torch without these internals: said as before
        return False


class ScalerWatch:
    """GradScaler.step and .update watched for one run (`patched()`), its findings in notes()."""

    def __init__(self, recorder) -> None:
        self.recorder = recorder
        self.skipped: list[dict] = []  # {"line", "scale", "new_scale"}
        self._awaiting_update: list[dict] = []

    @contextlib.contextmanager
    def patched(self):
        cls = torch.amp.GradScaler
        step, update = cls.step, cls.update
        watch = self

        @functools.wraps(step)
        def watched_step(scaler, optimizer, *args, **kwargs):
            if not scaler.is_enabled():
                return step(scaler, optimizer, *args, **kwargs)
            before = watch._stepped()
            unscaled = _unscaled_already(scaler, optimizer)
            result = step(scaler, optimizer, *args, **kwargs)
            watch._saw_step(scaler, before, unscaled)
            return result

        @functools.wraps(update)
        def watched_update(scaler, *args, **kwargs):
            result = update(scaler, *args, **kwargs)
            if scaler.is_enabled():
                watch._saw_update(scaler)
            return result

        cls.step, cls.update = watched_step, watched_update
        try:
            yield self
        finally:
            cls.step, cls.update = step, update

    def _stepped(self) -> tuple[int, Any]:
        return self.recorder.steps_taken, self.recorder.last_step

    def _saw_step(self, scaler, before: tuple[int, Any], unscaled: bool = False) -> None:
        try:
            with self.recorder.guard():
                scale = float(scaler.get_scale())
                taken, step = self.recorder.steps_taken, self.recorder.last_step
                if taken != before[0]:
                    # the step ran: its .grad had been divided by this scale just before (a
                    # step past the recording limit has no event to say it on)
                    if step is not None and step is not before[1]:
                        step["scaler"] = {"scale": scale}
                        if unscaled:  # the script's unscale_ divided; scaler.step did not
                            step["scaler"]["unscaled_first"] = True
                elif len(self.skipped) < MAX_NOTES:
                    note = {"line": self.recorder.current_line(), "scale": scale,
                            "new_scale": None}
                    self.skipped.append(note)
                    self._awaiting_update.append(note)
        except Exception as exc:  # noqa: BLE001 - the tracer's bookkeeping, never the script's
            self.recorder._internal_error("watching a GradScaler step", exc)

    def _saw_update(self, scaler) -> None:
        try:
            with self.recorder.guard():
                scale = float(scaler.get_scale())
                for note in self._awaiting_update:
                    note["new_scale"] = scale
                self._awaiting_update.clear()
        except Exception as exc:  # noqa: BLE001
            self.recorder._internal_error("watching a GradScaler update", exc)

    def notes(self) -> list[dict]:
        out = []
        for note in self.skipped:
            at = f"at line {note['line']}" if note["line"] else "in the script"
            after = (f" scaler.update() then set the scale to {note['new_scale']:g}."
                     if note["new_scale"] is not None else "")
            out.append(diagnostic(
                "grad_scaler_skipped_step", "warning",
                f"scaler.step(optimizer) {at} skipped optimizer.step(): the gradients, scaled "
                f"by {note['scale']:g}, held an inf or NaN, so the weights did not move (this "
                f"is GradScaler working as meant: it then tries a smaller scale).{after}"))
        return out
