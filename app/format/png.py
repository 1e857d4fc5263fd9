"""A figure's PNG, checked by its own header: what a browser will decode is the size written in
the image's IHDR chunk, whatever the Trace's `width` and `height` say. A worker's report is the
script's to write, so a 389 KB PNG of 20,000 x 20,000 pixels declared as 640 x 480 once reached
every follower's browser (3.3 GB in Chromium). Torch-free and web-free."""

from __future__ import annotations

import base64
import binascii

__all__ = ["MAX_SIDE", "PNG_SIGNATURE", "figure_problem", "png_size"]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_SIDE = 2000  # pixels a side: the schema's bound on a figure's width and height


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the IHDR chunk, which the PNG standard puts first; None when the
    bytes are not a PNG that begins that way."""
    if len(data) < 24 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR" \
            or int.from_bytes(data[8:12], "big") != 13:
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def figure_problem(figure: dict) -> str | None:
    """Why a Trace's figure is not shown, or None: its png not a PNG, its real size past
    MAX_SIDE or not the size it declares."""
    try:
        data = base64.b64decode(figure["png"], validate=True)
    except (binascii.Error, ValueError):
        return "its png is not base64"
    size = png_size(data)
    if size is None:
        return "it is not a PNG image"
    width, height = size
    if width > MAX_SIDE or height > MAX_SIDE or width < 1 or height < 1:
        return (f"it is {width} x {height} pixels, past the {MAX_SIDE} x {MAX_SIDE} a figure "
                "may be")
    if (width, height) != (figure["width"], figure["height"]):
        return (f"it is {width} x {height} pixels, not the {figure['width']} x "
                f"{figure['height']} it declares")
    return None
