"""Which reports are parsed one at a time (child.py): a forged one dense in lists, objects and
strings is, an honest one of the same size is not; and a forged report's schema check never
copies it to say where it failed (schema.py)."""

from __future__ import annotations

import json
import os
import resource
import threading

import torch

from app.runner import child


def _held_while_parsing(tmp_path, text: str) -> tuple[bool, object]:
    """Whether the one-at-a-time section was taken for `text`, and what _read_report said."""
    (tmp_path / "trace.json").write_text(text)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    taken = threading.Event()
    real = child._large_parses

    class Spy:
        def __enter__(self):
            taken.set()
            return real.__enter__()

        def __exit__(self, *exc):
            return real.__exit__(*exc)

    child._large_parses = Spy()
    try:
        out = child._read_report(fd, "trace.json", 64 << 20)
    finally:
        child._large_parses = real
        os.close(fd)
    return taken.is_set(), out


def test_a_dense_forgery_waits_its_turn_and_an_honest_report_of_its_size_does_not(tmp_path):
    forged = ('{"format":"autograd-lab/trace@1","x":[' + ",".join('{"ab":0}' for _ in range(
        250_000)) + "]}")
    held, (doc, _, problem) = _held_while_parsing(tmp_path, forged)
    assert held and doc is None and '"script" is a required property' in problem
    # a report as large of numbers (what an honest encoder's is mostly: its values, as torch
    # prints them) is parsed at once
    numbers = torch.randn(200_000).tolist()
    honest = json.dumps({"format": "autograd-lab/trace@1", "values": numbers})
    assert len(honest) > len(forged)
    held, _ = _held_while_parsing(tmp_path, honest)
    assert not held


def test_a_large_forgery_failing_at_its_top_is_not_copied_to_say_where(tmp_path):
    forged = ('{"format":"autograd-lab/trace@1","events":[' + ",".join('{"ab":0}' for _ in range(
        600_000)) + "]}")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _, (doc, _, problem) = _held_while_parsing(tmp_path, forged)
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert doc is None and problem
    # the parse itself is ~130 MB; a located error copied the document again (~250 MB more)
    assert grew_mb < 200, grew_mb
