"""Our own documents written fast (json_text.py): the same document as json's encoder writes,
and json's encoder where orjson refuses what it writes."""

from __future__ import annotations

import json

import pytest

from app.format.json_text import dumps


def test_a_document_reads_back_as_itself():
    doc = {"a": [1, 2.5, -0.0, 1e-7, 1e22, True, None], "b": {"ü": "ünïcode ✓"}, "c": ""}
    assert json.loads(dumps(doc)) == doc
    assert "ünïcode ✓".encode() in dumps(doc)  # UTF-8, not \\u escapes


@pytest.mark.parametrize("value", ["\ud800 a lone surrogate", 2**70, {1: "a key, no string"}])
def test_what_orjson_refuses_json_writes(value):
    for fast in (True, False):
        assert json.loads(dumps({"v": value}, fast)) == json.loads(json.dumps({"v": value}))


def test_json_s_encoder_when_asked():
    text = dumps({"ü": 1e-7}, fast=False)
    assert text == b'{"\\u00fc":1e-07}'  # json's own spelling: ASCII escapes, its exponent


def test_nan_is_refused_by_json_and_null_from_orjson():
    with pytest.raises(ValueError):
        dumps({"x": float("nan")}, fast=False)
    assert json.loads(dumps({"x": float("nan")})) == {"x": None}
