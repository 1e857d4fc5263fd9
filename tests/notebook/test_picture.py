"""Issue 37: where the kernel has no `dot`, the browser lays the graph out and sends the SVG
back, to be the static picture a saved notebook shows without a kernel. What comes back is
hostile input: it is bounded and rebuilt from graphviz's drawing elements (picture.py)."""

from __future__ import annotations

import base64
import re
import shutil
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("anywidget")

from autograd_lab.picture import MAX_PICTURE_BYTES, UnsafePicture, safe_svg  # noqa: E402
from tests.trace_facts import grad_fns  # noqa: E402


def _plain():
    """A reused layer's step run plainly: its loss, and the names PyTorch gave its graph's
    backward functions (grad_fn's class names, walked from the loss)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    lin, head, x = nn.Linear(3, 3), nn.Linear(3, 1), torch.randn(4, 3)
    loss = head(torch.tanh(lin(torch.tanh(lin(x))))).sum()
    names = {type(fn).__name__ for fn in grad_fns(loss.grad_fn)}
    return {"lin": lin, "head": head, "x": x, "torch": torch}, names - {"AccumulateGrad"}


def _shown(monkeypatch, tmp_path, draw=None):
    """show() of the step traced, in a kernel with no `dot` on its PATH."""
    import autograd_lab

    ns, names = _plain()
    doc = autograd_lab.trace("head(torch.tanh(lin(torch.tanh(lin(x))))).sum().backward()\n", ns)
    monkeypatch.setenv("PATH", str(tmp_path))
    shown = autograd_lab.show(doc, draw=draw)
    return shown, names


@pytest.fixture(scope="module")
def drawn() -> str:
    """graphviz's own SVG of the step's graph (the browser's graphviz writes the same kind)."""
    if shutil.which("dot") is None:
        pytest.skip("graphviz's dot is not installed")
    import autograd_lab

    ns, _ = _plain()
    doc = autograd_lab.trace("head(torch.tanh(lin(torch.tanh(lin(x))))).sum().backward()\n", ns)
    return autograd_lab.show(doc)._drawing().svg


def _words(svg: str) -> str:
    return "".join(ET.fromstring(svg).itertext())


def test_graphviz_s_drawing_keeps_its_nodes_and_the_names_pytorch_gave_them(drawn):
    _, names = _plain()
    kept = safe_svg(drawn)
    assert names and all(name in _words(kept) for name in names), names
    ours = ET.fromstring(drawn)
    mine = ET.fromstring(kept)
    count = lambda root, cls: sum(cls in (g.get("class") or "").split()  # noqa: E731
                                  for g in root.iter("{http://www.w3.org/2000/svg}g"))
    assert count(mine, "node") == count(ours, "node") >= len(names)
    assert count(mine, "edge") == count(ours, "edge") > 0
    assert mine.get("viewBox") == ours.get("viewBox")


@pytest.mark.parametrize("hostile", [
    '<script>alert(1)</script>',
    '<foreignObject><body xmlns="http://www.w3.org/1999/xhtml"><b>x</b></body></foreignObject>',
    '<image href="https://example.org/track.png" width="1" height="1"/>',
    '<a href="javascript:alert(1)"><text x="0" y="0">click</text></a>',
    '<g onload="alert(1)" class="node"><title>n</title></g>',
    '<polygon points="0,0 1,1" fill="url(https://example.org/x)" style="fill:url(#x)"/>',
    '<g transform="translate(1 1) url(javascript:alert(1))"/>',
    '<use xmlns:xlink="http://www.w3.org/1999/xlink" xlink:href="https://example.org/x.svg#a"/>',
    '<animate attributeName="href" to="javascript:alert(1)"/>',
    '<text x="0" y="0">a<tspan onclick="alert(1)">b</tspan></text>',
])
def test_what_could_act_or_fetch_is_dropped(drawn, hostile):
    forged = drawn.replace("</svg>", hostile + "</svg>")
    kept = safe_svg(forged)
    low = kept.lower()
    for word in ("script", "foreignobject", "href", "onload", "onclick", "url(", "javascript",
                 "example.org", "<image", "<use", "<animate", "style=", "<tspan"):
        assert word not in low, (word, hostile)
    # every attribute value left is plain: numbers, names, colours, points, transforms
    for element in ET.fromstring(kept).iter():
        for name, value in element.attrib.items():
            assert "(" not in value or name == "transform", (name, value)


@pytest.mark.parametrize("text, said", [
    ("", "no drawing"),
    (None, "no drawing"),
    ({"svg": 1}, "no drawing"),
    ("<html><body>hi</body></html>", "not an SVG"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><title>x</title></svg>', "no graph"),
    ("<svg", "does not parse"),
    ('<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
     '<svg xmlns="http://www.w3.org/2000/svg"><g><text>&b;</text></g></svg>', "document type"),
    ('<!DOCTYPE svg SYSTEM "file:///etc/passwd"><svg xmlns="http://www.w3.org/2000/svg"><g/>'
     '</svg>', "document type"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><g/></svg>' + " " * MAX_PICTURE_BYTES, "8,000,000"),
    # fewer characters than the bound, more bytes (as the browser sends it, in UTF-8)
    ('<svg xmlns="http://www.w3.org/2000/svg"><g><text>' + "é" * (MAX_PICTURE_BYTES // 2)
     + "</text></g></svg>", "8,000,0"),
    # 20,000 groups, one in another (140 KB): past any drawing's depth, said as such (it was
    # a RecursionError, which nothing showing the picture catches)
    ('<svg xmlns="http://www.w3.org/2000/svg">' + "<g>" * 20_000 + "</g>" * 20_000 + "</svg>",
     "nests elements more than 32 deep"),
])
def test_what_is_no_graphviz_drawing_is_refused_with_why(text, said):
    with pytest.raises(UnsafePicture, match=said):
        safe_svg(text)


def test_without_dot_the_browser_s_picture_becomes_the_static_output(monkeypatch, tmp_path,
                                                                      drawn):
    """The kernel asks for the picture only where the browser lays it out, takes it once, and
    shows the static output again with it: as the kernel's drawing would be (SVG, and an <img>
    of it in the HTML, under the note to run the cell), saying who drew it."""
    shown, names = _shown(monkeypatch, tmp_path)
    first, live = shown._outputs(updatable=True)
    assert "image/svg+xml" not in first and "keeps its picture here" in first["text/plain"]
    widget = shown.live
    assert widget.keep_picture == MAX_PICTURE_BYTES
    sent: list = []
    widget._keep = sent.append  # what display.py's _keep_picture would be handed
    widget._message(widget, {"something": "else"}, [])
    assert sent == []
    forged = drawn.replace("</svg>", "<script>alert(1)</script></svg>")
    widget._message(widget, {"picture": forged}, [])
    widget._message(widget, {"picture": "<svg/>"}, [])  # a second view's: not taken
    assert sent == [forged]
    # too big to send: the browser sends its size, which the kernel says
    shown._outputs(updatable=True)
    sizes: list = []
    shown.live._keep = sizes.append
    shown.live._message(shown.live, {"picture_size": 12_345_678}, [])
    assert len(sizes) == 1 and "12,345,678 bytes" in str(sizes[0])

    static = shown.kept_static(sent[0])
    svg = static["image/svg+xml"]
    assert "script" not in svg and all(name in _words(svg) for name in names)
    url = re.search(r'<img class="autograd-lab-picture" src="data:image/svg\+xml;base64,'
                    r'([A-Za-z0-9+/=]+)"', static["text/html"])
    assert url and base64.b64decode(url[1]).decode("utf-8") == svg
    assert "A saved picture: run this cell" in static["text/html"]
    assert f'data-autograd-lab-static="{shown.static_id}"' in static["text/html"]
    said = static["text/plain"]
    assert "not installed" in said and "laid out in the browser" in said
    assert "draws no static picture" not in said
    assert static["application/vnd.autograd-lab.trace+json"] == \
        first["application/vnd.autograd-lab.trace+json"]
    assert live["text/plain"] == ""  # the note above is the only one (no second, LIVE_ONLY)



def test_a_trace_shown_twice_keeps_each_browser_s_picture_in_its_own_output(
        monkeypatch, tmp_path, drawn):
    """The browser answers later than the output is made: by then the same Trace may have been
    shown again. The first live view's picture updates the first static output (by its
    display id), as IPython publishes it; the comm message handler is called with the message
    a browser sends, the kernel side's real input."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    shown, names = _shown(monkeypatch, tmp_path)
    with capture_output() as shows:
        shown._ipython_display_()
        first_view = shown.live
        shown._ipython_display_()
    static_ids = [o.transient.get("display_id") for o in shows.outputs
                  if "image/svg+xml" not in o.data and "keeps its picture here" in
                  o.data.get("text/plain", "")]
    assert len(static_ids) == 2 and len(set(static_ids)) == 2 and all(static_ids), static_ids
    with capture_output() as answered:
        first_view._message(first_view, {"picture": drawn}, [])
    (update,) = answered.outputs
    assert update.update and update.transient["display_id"] == static_ids[0]
    assert all(name in _words(update.data["image/svg+xml"]) for name in names)
    assert f'data-autograd-lab-static="{static_ids[0]}"' in update.data["text/html"]


def test_a_refused_picture_leaves_the_note_and_says_why(monkeypatch, tmp_path):
    shown, _ = _shown(monkeypatch, tmp_path)
    shown._outputs(updatable=True)
    static = shown.kept_static("<html>not a drawing</html>")
    assert "image/svg+xml" not in static and "<img" not in static["text/html"]
    assert "not installed" in static["text/plain"]
    assert "was not kept: the browser's drawing is not an SVG" in static["text/plain"]
    from autograd_lab.picture import too_big
    too = shown.kept_static(too_big(9_000_000))
    assert "9,000,000 bytes" in too["text/html"] and "--layout modules" in too["text/html"]


def test_the_kernel_asks_for_no_picture_where_it_drew_one_or_cannot_show_it_again(
        monkeypatch, tmp_path):
    import autograd_lab

    ns, _ = _plain()
    doc = autograd_lab.trace("head(torch.tanh(lin(torch.tanh(lin(x))))).sum().backward()\n", ns)
    if shutil.which("dot"):
        with_dot = autograd_lab.show(doc)
        with_dot._outputs(updatable=True)
        assert with_dot.live.keep_picture == 0
    shown, _ = _shown(monkeypatch, tmp_path)
    shown._repr_mimebundle_()  # one bundle, no display id: nothing to show again
    assert shown.live.keep_picture == 0
    chosen, _ = _shown(monkeypatch, tmp_path, draw="browser")
    chosen._outputs(updatable=True)
    assert chosen.live.keep_picture == MAX_PICTURE_BYTES
