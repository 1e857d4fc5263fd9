"""How each kind of node is drawn: defined once, read by the DOT renderer and the page legend.

Every kind differs in shape (and most in outline style) as well as colour, so the graph reads
on a washed-out projector and for colour-blind viewers. Colours are from the Okabe-Ito palette.
"""

KINDS: dict[str, dict[str, str]] = {
    "output": {"label": "output (root)", "shape": "doubleoctagon", "fill": "#E69F00",
               "style": "filled,bold", "text": "#000000"},
    "op": {"label": "backward op", "shape": "box", "fill": "#DDEEFF",
           "style": "filled,rounded", "text": "#000000"},
    "custom": {"label": "custom Function", "shape": "hexagon", "fill": "#CC79A7",
               "style": "filled,bold", "text": "#000000"},
    "param": {"label": "parameter (AccumulateGrad)", "shape": "ellipse", "fill": "#56B4E9",
              "style": "filled", "text": "#000000"},
    "leaf": {"label": "leaf input (AccumulateGrad)", "shape": "ellipse", "fill": "#F0E442",
             "style": "filled,dashed", "text": "#000000"},
}

# what a big graph drawn by module (app/render/group.py) adds: click either to open it
UNIT_KINDS: dict[str, dict[str, str]] = {
    "module": {"label": "module, collapsed (click to open)", "shape": "box3d", "fill": "#E8E8E8",
               "style": "filled,bold", "text": "#000000"},
    "fold": {"label": "repeated blocks, folded (click to open)", "shape": "folder",
             "fill": "#009E73", "style": "filled,bold", "text": "#000000"},
}

EDGE_COLOR = "#555555"

__all__ = ["KINDS", "UNIT_KINDS", "EDGE_COLOR"]
