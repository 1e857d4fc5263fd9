"""The matplotlib figures a script makes, kept for its run page: every `plt.show()`, every
`savefig(...)` (the file is still written), and what is still open at the end.

Tutorials plot their gradients; pasted as they are, their figures belong beside the graph.
Each figure is a PNG of bounded size (at most MAX_SIDE pixels on its longer side and MAX_PNG
bytes), with the script line that showed or saved it. Without matplotlib nothing happens.
"""

from __future__ import annotations

import base64
import hashlib
import io
import sys
from collections.abc import Callable
from typing import Any

from app.format import Figure as FigureRecord
from app.format.png import png_size

from .on_import import on_import

__all__ = ["FigureCapture", "MAX_FIGURES"]

MAX_FIGURES = 20
MAX_PNG = 1_500_000  # bytes of one PNG
MAX_TOTAL = 8_000_000  # bytes of all of them: the report (32 MiB) must hold them as base64
MAX_SIDE = 1600  # pixels
DPI = 100


class FigureCapture:
    """`with FigureCapture(line_of) as figures: ...run...; figures.finish()`."""

    def __init__(self, line_of: Callable[[], int | None], load: bool = True,
                 show: bool = False) -> None:
        """`load`: import matplotlib (with the Agg backend) if nothing has yet. Off in a kernel
        (importing pyplot took 1.8 s of a first traced cell that draws nothing, and the kernel's
        own backend, inline, is the person's; a kernel that has pyplot is watched as it is) and
        in a worker whose script never names it (the runner's preload.py): pyplot is then
        watched from the moment the code imports it, however it does (on_import.py).
        `show`: the figures are kept and also shown as without autograd-lab (a kernel: its
        `plt.show()` draws inline, and what is open at the end is left open for the kernel's
        backend to show after the cell, as it does after a plain cell)."""
        self.line_of = line_of
        self.load = load
        self.show = show
        self.records: list[FigureRecord] = []
        self._dropped: set[int] = set()  # ids of figures not kept: past MAX_FIGURES, too
        # large, or failing to draw
        self._bytes = 0  # PNG bytes kept so far
        self._before: set[int] = set()  # figure numbers that were open before the run
        self._plt: Any = None
        self._originals: tuple[Any, Any] | None = None
        self._taken: dict[int, str] = {}  # id(figure) -> the digest of its last PNG kept
        self._finished = False  # the script has ended: nothing more is its figure
        self._left_open: set[int] = set()  # `show`: the script's figures open at its end
        self._cancels: list[Callable[[], None]] = []  # imports still awaited (on_import.py)

    def __enter__(self) -> FigureCapture:
        if not self.load and "matplotlib.pyplot" not in sys.modules:
            # imported by the script, however it does (a name the source hides, a helper
            # module's): its figures are watched from then on, as an imported one's are
            if not self.show:  # a worker's: Agg, set before pyplot picks its backend
                self._cancels.append(on_import("matplotlib", _drawing_to_png))
            self._cancels.append(on_import("matplotlib.pyplot", self._watch))
            return self
        try:
            import matplotlib

            if self.load:  # no display in a worker; a script's own use() still wins
                matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return self
        self._watch(plt)
        return self

    def _watch(self, plt: Any) -> None:
        """Patch pyplot's `show` and Figure's `savefig` to keep what they show and save."""
        from matplotlib.figure import Figure

        self._plt = plt
        self._before = set(plt.get_fignums())  # (a test traces several scripts in-process)
        show, savefig = plt.show, Figure.savefig
        self._originals = (show, savefig)
        capture = self

        def shown(*args, **kwargs):
            for number in capture._numbers():
                capture.take(plt.figure(number), "show")
            if capture.show:  # the kernel's backend draws it where a plain cell's would be
                return show(*args, **kwargs)
            return None  # Agg shows nothing: the page does

        def saved(figure, *args, **kwargs):
            result = savefig(figure, *args, **kwargs)
            capture.take(figure, "savefig")
            return result

        plt.show = shown
        Figure.savefig = saved

    def __exit__(self, *exc) -> None:
        for cancel in self._cancels:  # an import after the run is not the script's
            cancel()
        self._cancels.clear()
        if self.show and self._finished:
            # what autograd-lab drew after the script (finish) is not the person's to see
            for number in self._numbers():
                if number not in self._left_open:
                    self._plt.close(number)
        if self._originals is not None:
            from matplotlib.figure import Figure

            self._plt.show, Figure.savefig = self._originals
            self._originals = None

    @property
    def dropped(self) -> int:
        return len(self._dropped)

    def _numbers(self) -> list[int]:
        return [n for n in self._plt.get_fignums() if n not in self._before]

    def finish(self) -> None:
        """Keep the figures still open that were never kept, or changed since; then close
        the run's figures."""
        if self._plt is None:
            return
        for number in self._numbers():
            self.take(self._plt.figure(number), "open at the end", line=None)
        if self.show:  # shown, they are the kernel's backend's to show and close
            self._left_open = set(self._numbers())
        else:
            for number in self._numbers():
                self._plt.close(number)
        # what autograd-lab does after the script (calling its torch.func function again on
        # copies, after_work.py) may plot too: those figures are ours, not the script's
        self._finished = True

    def take(self, figure: Any, via: str, line: int | None | bool = True) -> None:
        """Keep `figure` as it looks now, unless it was kept already and looks the same
        (saved and then shown is one figure)."""
        if self._finished:
            return
        if len(self.records) >= MAX_FIGURES:
            if id(figure) not in self._taken:
                self._dropped.add(id(figure))
            return
        if id(figure) in self._taken and not figure.stale:
            return  # certainly unchanged since it was kept (`stale` may be set needlessly)
        try:
            width, height = figure.get_size_inches()
            dpi = max(1.0, min(float(figure.dpi), DPI, MAX_SIDE / max(width, height, 0.01)))
            buffer = io.BytesIO()
            self._originals[1](figure, buffer, format="png", dpi=dpi)
            data = buffer.getvalue()
        except Exception:  # noqa: BLE001 - a figure that cannot be drawn is only not kept
            self._dropped.add(id(figure))
            return
        digest = hashlib.sha256(data).hexdigest()
        if self._taken.get(id(figure)) == digest:
            return
        size = png_size(data)  # the PNG's own (IHDR), the one the server checks it by
        if len(data) > MAX_PNG or self._bytes + len(data) > MAX_TOTAL or size is None:
            self._dropped.add(id(figure))
            return
        self._bytes += len(data)
        self._taken[id(figure)] = digest
        self.records.append({
            "index": len(self.records), "via": via,
            "line": self.line_of() if line is True else None,
            # the PNG's own size, not the inches times dpi rounded
            "width": size[0], "height": size[1],
            "png": base64.b64encode(data).decode("ascii")})


def _drawing_to_png(matplotlib: Any) -> None:
    """matplotlib imported inside a worker's run: no display there, PNGs for the page (the
    worker's MPLBACKEND says so too; a script's own use() after its import still wins)."""
    matplotlib.use("Agg")
