"""Errors: each bad input raises a documented exception that says what and
where; nothing panics across the FFI boundary."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, List

import pytest

import agui

RUN = [
    {"type": "RUN_STARTED", "threadId": "t", "runId": "r1"},
    {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "hi"},
    {"type": "TEXT_MESSAGE_END", "messageId": "m"},
    {"type": "RUN_FINISHED", "threadId": "t", "runId": "r1"},
]


def test_malformed_json_names_the_event_and_line() -> None:
    data = b'{"type":"RUN_STARTED","threadId":"t","runId":"r"}\n{"type": "TEXT_MESSAGE_START",\n'
    with pytest.raises(agui.AguiDecodeError) as info:
        agui.reduce(data)
    assert info.value.index == 1
    assert "event 1" in str(info.value) and "line 2" in str(info.value)


def test_not_an_event_object() -> None:
    with pytest.raises(agui.AguiDecodeError) as info:
        agui.verify_events(b'[{"type":"RUN_STARTED","threadId":"t","runId":"r"}, 42]')
    assert info.value.index == 1
    assert "expected an event object" in str(info.value)


def test_wrong_python_types() -> None:
    with pytest.raises(agui.AguiDecodeError, match="event #1: expected a dict"):
        agui.reduce([RUN[0], 3.5])
    with pytest.raises(agui.AguiDecodeError, match="event #0: cannot encode as JSON"):
        agui.reduce([{"type": "CUSTOM", "name": "x", "value": object()}, {"type": "RAW"}, 1])
    with pytest.raises(agui.AguiDecodeError, match="found int"):
        agui.reduce(12)  # type: ignore[arg-type]
    with pytest.raises(agui.AguiDecodeError, match="single event"):
        agui.reduce(RUN[0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="output must be one of"):
        agui.reduce(RUN, output="xml")
    with pytest.raises(ValueError, match="unknown format"):
        agui.compact_events(RUN, output="bytes", format="yaml")
    with pytest.raises(ValueError, match="mode"):
        agui.compact_events(RUN, "smallest")
    with pytest.raises(agui.AguiDecodeError, match="must have a \"type\""):
        agui.reduce([{"no": "type"}])


def test_a_stream_the_verifier_rejects() -> None:
    bad = RUN[:2] + [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "other", "delta": "x"}]
    with pytest.raises(agui.AguiVerifyError) as info:
        agui.verify_events(bad)
    err = info.value
    assert err.index == 2
    assert err.event_type == "TEXT_MESSAGE_CONTENT"
    assert "other" in err.reason
    assert isinstance(err, agui.AguiError)


def test_a_stream_the_reducer_rejects() -> None:
    with pytest.raises(agui.AguiReduceError) as info:
        agui.reduce([{"type": "TEXT_MESSAGE_CHUNK", "delta": "x"}])
    assert info.value.index == 0
    assert info.value.event_type == "TEXT_MESSAGE_CHUNK"


def test_lineage_and_artifact_errors() -> None:
    with pytest.raises(agui.AguiLineageError, match="no run \"nope\""):
        agui.history_at(RUN, "nope")
    with pytest.raises(agui.AguiArtifactError, match="malformed"):
        agui.validate_artifact(b'{"not": "an artifact"}')
    with pytest.raises(agui.AguiCompactError, match="no run"):
        agui.compact_events(RUN, "latest", "missing")


def test_a_missing_file() -> None:
    with pytest.raises(agui.AguiDecodeError, match="cannot read .*nowhere.ndjson"):
        agui.read_events("/nowhere.ndjson")


def test_bad_store_urls() -> None:
    for url in ("mysql://x", "nonsense", ""):
        with pytest.raises(agui.AguiStoreError) as info:
            agui.Store(url)
        assert info.value.kind == "invalid"
        assert "unsupported store URL" in str(info.value)
    with pytest.raises(agui.AguiStoreError):
        agui.Store("sqlite:///nonexistent-dir/deeper/x.db")


def test_a_closed_store(tmp_path: Path) -> None:
    store = agui.Store(f"sqlite://{tmp_path}/s.db")
    store.append("t", RUN)
    store.close()
    with pytest.raises(agui.AguiStoreError) as info:
        store.append("t", RUN)
    assert info.value.kind == "unavailable"
    with pytest.raises(agui.AguiStoreError):
        store.read("t")


def test_store_errors_carry_their_kind() -> None:
    store = agui.Store("memory://")
    with pytest.raises(agui.AguiStoreError) as info:
        store.read("absent")
    assert info.value.kind == "not_found"
    store.append("t", RUN)
    with pytest.raises(agui.AguiStoreError) as info:
        store.append("t", RUN[:1], expected_seq=2)
    assert info.value.kind == "conflict"


def test_a_panic_becomes_an_exception() -> None:
    with pytest.raises(agui.AguiInternalError, match="boom"):
        agui._agui._panic_for_tests("boom")
    # The interpreter goes on.
    assert agui.verify_events(RUN) == 5


FUNCS: List[Callable[[bytes], Any]] = [
    agui.verify_events,
    agui.verify_all,
    agui.expand_chunks,
    agui.reduce,
    lambda d: agui.compact_events(d, "deltas", output="bytes"),
    lambda d: agui.compact_events(d, "snapshot"),
    lambda d: agui.compact_events(d, "latest"),
    agui.run_tree,
    lambda d: agui.history_at(d, "r1"),
    lambda d: agui.branch_events(d, "r1"),
    lambda d: agui.export_artifact(d, "r1"),
    agui.validate_artifact,
    agui.read_events,
    agui.to_sse,
]


def _mutate(rng: random.Random, base: bytes) -> bytes:
    data = bytearray(base)
    for _ in range(rng.randint(1, 8)):
        op = rng.randint(0, 3)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif op == 1:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
        elif op == 2 and data:
            del data[pos:pos + rng.randint(1, 10)]
        else:
            data[pos:pos] = rng.choice([b"{", b"}", b"[", b"]", b'"', b"\n", b"data: ", b"\\u"])
    return bytes(data)


def test_fuzz_random_bytes_never_escape_as_anything_but_agui_errors() -> None:
    """Random and mutated bytes into every function: each call returns or
    raises an AguiError (or ValueError); no panic, no crash, no other type."""
    rng = random.Random(1414)
    base = agui.to_ndjson(RUN)
    sse = agui.to_sse(RUN)
    calls = 0
    for i in range(400):
        if i % 4 == 0:
            data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
        else:
            data = _mutate(rng, rng.choice([base, sse, b"[" + base.replace(b"\n", b",")[:-1] + b"]"]))
        for f in FUNCS:
            try:
                f(data)
            except agui.AguiInternalError:
                raise
            except (agui.AguiError, ValueError):
                pass
            calls += 1
    assert calls == 400 * len(FUNCS)
