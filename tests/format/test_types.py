"""The Trace's TypedDicts (app/format/types.py) and its JSON Schema describe the same document:
for each definition, the same property names and the same required keys."""

from __future__ import annotations

import typing

import pytest

from app.format import load_schema, types

SCHEMA = load_schema()
DEFS = SCHEMA["$defs"]
NODE = DEFS["node"]["properties"]
GRAPH = DEFS["graph"]["properties"]
BACKWARD = DEFS["backward"]["properties"]

# TypedDict -> its object schema in trace.schema.json
PAIRS = [
    (types.Trace, SCHEMA),
    (types.Script, SCHEMA["properties"]["script"]),
    (types.EventsSkipped, SCHEMA["properties"]["events_skipped"]),
    (types.RunLink, SCHEMA["properties"]["run"]),
    (types.TensorSummary, DEFS["summary"]),
    (types.Node, DEFS["node"]),
    (types.SavedValue, NODE["saved"]["items"]),
    (types.BackwardSource, NODE["backward_source"]["oneOf"][1]),
    (types.Gradcheck, NODE["gradcheck"]),
    (types.Edge, DEFS["edge"]),
    (types.Graph, DEFS["graph"]),
    (types.Cut, GRAPH["cuts"]["items"]),
    (types.BackwardEvent, DEFS["backward"]),
    (types.GradcheckCall, BACKWARD["gradcheck"]),
    (types.Contribution, BACKWARD["contributions"]["additionalProperties"]["items"]),
    (types.GradChange, BACKWARD["grads"]["additionalProperties"]),
    (types.StepEvent, DEFS["step"]),
    (types.StepChange, DEFS["step"]["properties"]["params"]["additionalProperties"]),
    (types.Param, DEFS["param"]),
    (types.Diagnostic, DEFS["diagnostic"]),
    (types.ErrorRecord, DEFS["error"]),
    (types.Explanation, DEFS["explanation"]),
    (types.Figure, DEFS["figure"]),
    (types.View, DEFS["view"]),
    (types.ViewMatch, DEFS["view"]["properties"]["matches"]),
    (types.DoubleCheck, NODE["gradcheck"]["properties"]["double"]),
    (types.Fix, DEFS["explanation"]["properties"]["fix"]["oneOf"][1]),
    (types.Edit, DEFS["explanation"]["properties"]["fix"]["oneOf"][1]["properties"]["edits"][
        "items"]),
    (types.CompiledRegion, DEFS["compiled_region"]),
    (types.FxGraph, DEFS["fx_graph"]["oneOf"][1]),
    (types.FxOp, DEFS["fx_graph"]["oneOf"][1]["properties"]["ops"]["items"]),
    (types.SavedForBackward, DEFS["compiled_region"]["properties"]["saved"]["items"]),
    (types.RecomputedOp, DEFS["compiled_region"]["properties"]["recomputed"]["items"]),
    (types.CheckpointRegion, GRAPH["checkpoints"]["items"]),
    (types.RecomputedForward, BACKWARD["recomputed"]["items"]),
]


@pytest.mark.parametrize("typed, schema", PAIRS, ids=[t.__name__ for t, _ in PAIRS])
def test_typed_dict_names_the_schema_properties_and_required_keys(typed, schema):
    assert set(typing.get_type_hints(typed)) == set(schema["properties"])
    assert typed.__required_keys__ == set(schema.get("required", ()))


def test_every_object_definition_has_a_typed_dict():
    objects = {name for name, d in DEFS.items() if d.get("type") == "object"}
    covered = {name for name, d in DEFS.items() for _, s in PAIRS if s is d}
    assert objects == covered


def test_node_kinds_and_levels_match():
    assert set(typing.get_args(types.NodeKind)) == set(NODE["kind"]["enum"])
    assert set(typing.get_args(types.DiagnosticLevel)) == \
        set(DEFS["diagnostic"]["properties"]["level"]["enum"])
    assert SCHEMA["properties"]["format"]["const"] == types.FORMAT == SCHEMA["$id"]
