"""Round trip through the official Python SDK's models (`ag_ui.core`,
ag-ui-protocol 1.0.0) for every event type: agui's output as models, the
models back into agui, and the same events and the same results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

import agui

core = pytest.importorskip("ag_ui.core")


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def test_every_event_type_round_trips_through_ag_ui_core(corpus: List[Path]) -> None:
    known = {t.value for t in core.EventType}
    examples: Dict[str, List[Dict[str, Any]]] = {}
    for path in corpus:
        for event in agui.read_events(path):
            if event["type"] in known and len(examples.setdefault(event["type"], [])) < 20:
                examples[event["type"]].append(event)
    missing = known - set(examples)
    assert not missing, f"the corpus has no {sorted(missing)}"
    total = 0
    for ty, events in sorted(examples.items()):
        models = agui.read_events(agui.to_ndjson(events), output="model")
        for original, model in zip(events, models):
            assert isinstance(model, core.BaseEvent), ty
            assert model.type.value == ty
            # Models in, dicts out: the same event (the SDK leaves out nulls).
            back = agui.read_events(agui.to_ndjson([model]))[0]
            assert _drop_none(back) == _drop_none(original), ty
            total += 1
    print(f"\nag_ui.core round trip: {total} events of {len(examples)} types")
    assert len(examples) == len(known) == 31


def test_model_inputs_give_the_same_results_as_dicts(corpus: List[Path]) -> None:
    checked = 0
    for path in corpus:
        if path.name.startswith(("invalid", "unknown", "chunk-soup", "mixed")):
            continue
        events = agui.read_events(path)
        if any(e["type"] not in {t.value for t in core.EventType} for e in events):
            continue
        models = agui.read_events(path, output="model")
        # The SDK leaves out nulls (null fields and nulls inside free-form
        # values alike); otherwise the results are the same.
        assert _drop_none(agui.reduce(models)) == _drop_none(agui.reduce(events))
        assert agui.verify_events(models) == len(events)
        assert _drop_none(agui.compact_events(models, "snapshot")) == _drop_none(
            agui.compact_events(events, "snapshot"))
        checked += 1
    assert checked >= 10


def test_unknown_event_types_stay_dicts_in_model_output() -> None:
    events = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r", "extra": {"kept": 1}},
        {"type": "MY_OWN_EVENT", "payload": [1, 2]},
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"},
    ]
    out = agui.read_events(agui.to_ndjson(events), output="model")
    assert isinstance(out[0], core.RunStartedEvent)
    assert out[1] == {"type": "MY_OWN_EVENT", "payload": [1, 2]}
    # Unknown fields survive the model (extra="allow") and come back.
    assert json.loads(agui.to_ndjson([out[0]]))["extra"] == {"kept": 1}


def test_reduce_as_models() -> None:
    events = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "hi"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m"},
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"},
    ]
    out = agui.reduce(events, output="model")
    assert isinstance(out["messages"][0], core.AssistantMessage)
    assert out["messages"][0].content == "hi"
    start = [core.UserMessage(id="u", role="user", content="hello")]
    assert agui.reduce(events, start)["messages"][0] == {"id": "u", "role": "user", "content": "hello"}
