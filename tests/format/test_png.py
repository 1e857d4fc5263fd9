"""A figure's real size read from its PNG header (app/format/png.py), as Pillow reads it."""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

from app.format.png import figure_problem, png_size  # noqa: E402


def _matplotlib_png() -> bytes:
    fig, ax = plt.subplots(figsize=(3.1, 2.3), dpi=97)
    ax.plot([0, 1], [1, 0])
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


def test_the_size_is_the_one_pillow_decodes():
    data = _matplotlib_png()
    assert png_size(data) == Image.open(io.BytesIO(data)).size


def test_a_figure_declaring_another_size_or_not_a_png_is_refused():
    data = _matplotlib_png()
    width, height = Image.open(io.BytesIO(data)).size
    figure = {"png": base64.b64encode(data).decode(), "width": width, "height": height}
    assert figure_problem(figure) is None
    assert figure_problem({**figure, "width": width + 1}) == (
        f"it is {width} x {height} pixels, not the {width + 1} x {height} it declares")
    gif = base64.b64encode(b"GIF89a" + bytes(30)).decode()
    assert figure_problem({**figure, "png": gif}) == "it is not a PNG image"
    assert png_size(data[:20]) is None  # cut short before its size
