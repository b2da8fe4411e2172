"""agui: verify, compact, restore, branch and persist AG-UI event streams
in-process, with the same Rust core (and the same results) as the ``agui``
CLI and the ``agui serve`` gateway.

Events go in as a list of dicts, a list of official ``ag_ui.core`` models,
or an encoded stream (``bytes``/``str`` holding a JSON array, NDJSON or SSE;
``pathlib.Path`` for a file). Results come back as dicts (``output="dict"``,
the default), as encoded ``bytes`` (``output="bytes"``, the fast path, byte
for byte what the CLI prints) or as ``ag_ui.core`` models
(``output="model"``). The work runs in Rust with the GIL released.

The dict path goes through Python's ``json`` module: integers of any size
survive it, but a decimal with more digits than a float holds does not
(``0.1000000000000000000001`` comes back as ``0.1``) and key order is kept.
The bytes path keeps every event's exact text: big integers, exact decimals,
escapes and unknown fields survive it unchanged.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

from . import _agui
from ._agui import (
    AguiArtifactError,
    AguiCompactError,
    AguiDecodeError,
    AguiError,
    AguiInternalError,
    AguiLineageError,
    AguiReduceError,
    AguiStoreError,
    AguiVerifyError,
)
from ._io import (
    EventsInput,
    check_output,
    conversation_out,
    encode_events,
    encode_start,
    events_out,
)
from .store import AsyncStore, Store

__all__ = [
    "AguiArtifactError",
    "AguiCompactError",
    "AguiDecodeError",
    "AguiError",
    "AguiInternalError",
    "AguiLineageError",
    "AguiReduceError",
    "AguiStoreError",
    "AguiVerifyError",
    "AsyncStore",
    "EventsInput",
    "Store",
    "branch_events",
    "compact_events",
    "expand_chunks",
    "export_artifact",
    "history_at",
    "read_events",
    "reduce",
    "run_tree",
    "to_json",
    "to_ndjson",
    "to_sse",
    "validate_artifact",
    "verify_all",
    "verify_events",
]

__version__ = "0.1.0"


def _events_result(data: bytes, output: str) -> Any:
    return data if output == "bytes" else events_out(data, output)


def _to(output: str, format: str) -> str:
    check_output(output)
    return format if output == "bytes" else "json"


def read_events(
    source: Any, *, format: Optional[str] = None, output: str = "dict", to: str = "ndjson"
) -> Any:
    """Reads an event stream.

    ``source`` is a path (``str`` or ``os.PathLike``) or the stream's
    ``bytes``; the framing (JSON array, NDJSON, SSE) is detected unless
    ``format`` names it. Returns a list of event dicts, of ``ag_ui.core``
    models (``output="model"``; an event type the SDK does not know stays a
    dict), or the stream re-encoded as ``to`` (``output="bytes"``).

    Raises ``AguiDecodeError`` (with ``index``) for input that is not an
    event stream.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        import os

        data = _agui.read_file(os.fspath(source))
    return _events_result(_agui.encode(data, _to(output, to), None, format), output)


def to_ndjson(events: EventsInput) -> bytes:
    """The events as NDJSON: one event's exact text per line."""
    out: bytes = _agui.encode(encode_events(events), "ndjson")
    return out


def to_json(events: EventsInput) -> bytes:
    """The events as a JSON array (one event a line, as ``agui convert --to json``)."""
    out: bytes = _agui.encode(encode_events(events), "json")
    return out


def to_sse(events: EventsInput, *, first_id: Optional[int] = None) -> bytes:
    """The events as server-sent events (``data:`` frames); with ``first_id``
    each frame gets an ``id:`` line, counting up from it."""
    out: bytes = _agui.encode(encode_events(events), "sse", first_id)
    return out


def verify_events(events: EventsInput) -> int:
    """Checks a stream against the AG-UI sequence rules of the official
    client (chunks expanded first), with the same verdicts as
    ``agui verify``. Returns the number of events.

    Raises ``AguiVerifyError`` with ``index`` (input event, from 0),
    ``event_type`` and ``reason``; ``AguiDecodeError`` for input that cannot
    be decoded.
    """
    count: int = _agui.verify(encode_events(events))
    return count


def verify_all(events: EventsInput) -> List[Dict[str, Any]]:
    """Every problem of a stream (as ``agui verify --all``), each a dict with
    ``index``, ``event_type`` and ``reason``; an empty list when it is valid."""
    return [
        {"index": i, "event_type": t, "reason": r}
        for (i, t, r) in _agui.verify_all(encode_events(events))
    ]


def expand_chunks(events: EventsInput, *, output: str = "dict", format: str = "ndjson") -> Any:
    """Expands ``*_CHUNK`` events into START/CONTENT/END events exactly as the
    official ``transformChunks`` (``agui convert --expand-chunks``)."""
    data = _agui.expand_chunks(encode_events(events), _to(output, format))
    return _events_result(data, output)


def reduce(
    events: EventsInput,
    messages: Optional[Iterable[Any]] = None,
    state: Any = None,
    *,
    output: str = "dict",
    pretty: bool = False,
) -> Any:
    """Reduces events to ``{"messages": [...], "state": ...}`` exactly as the
    official client (``agui reduce``), starting from ``messages`` and
    ``state`` (default: none and ``{}``).

    ``output="bytes"`` gives the JSON text (``pretty=True``: the CLI's
    layout, byte for byte). Raises ``AguiReduceError`` (``index``,
    ``event_type``, ``reason``) for an event the official reducer throws on.
    """
    check_output(output)
    data = _agui.reduce(encode_events(events), encode_start(messages, state), pretty)
    return conversation_out(data, output)


def compact_events(
    events: EventsInput,
    mode: str = "deltas",
    branch: Optional[str] = None,
    *,
    messages: Optional[Iterable[Any]] = None,
    state: Any = None,
    output: str = "dict",
    format: str = "ndjson",
) -> Any:
    """Compacts a stream without changing its meaning (``agui compact``).

    ``mode``: ``"deltas"`` (merged deltas, every event in place),
    ``"snapshot"`` (one checkpoint per run) or ``"latest"`` (one run envelope
    restoring the thread; ``branch`` picks the run, default the last).
    ``messages``/``state``: what the consumer holds before the first event.
    """
    data = _agui.compact(
        encode_events(events), mode, branch, encode_start(messages, state), _to(output, format)
    )
    return _events_result(data, output)


def run_tree(events: EventsInput, *, output: str = "dict") -> Any:
    """The thread's runs, depth first (``agui history --tree --json``): each a
    dict with ``runId``, ``threadId``, ``parentRunId``, ``explicitParent``,
    ``status``, ``eventCount``... ``output="bytes"`` gives the CLI's NDJSON.

    Raises ``AguiLineageError`` for lineage faults."""
    check_output(output)
    data: bytes = _agui.run_tree(encode_events(events))
    if output == "bytes":
        return data
    import json

    return [json.loads(line) for line in data.splitlines() if line]


def history_at(
    events: EventsInput,
    run_id: str,
    event: Optional[int] = None,
    *,
    messages: Optional[Iterable[Any]] = None,
    state: Any = None,
    output: str = "dict",
    pretty: bool = False,
) -> Any:
    """``{"messages", "state"}`` at the end of run ``run_id``'s branch, or
    after its event ``event`` (0 is its RUN_STARTED), as
    ``agui history --at``. Messages of abandoned branches never leak in."""
    check_output(output)
    data = _agui.history_at(
        encode_events(events), run_id, event, encode_start(messages, state), pretty
    )
    return conversation_out(data, output)


def branch_events(
    events: EventsInput,
    run_id: str,
    event: Optional[int] = None,
    *,
    output: str = "dict",
    format: str = "ndjson",
) -> Any:
    """The events of the branch ending at ``run_id`` (the thread's preamble,
    then each run from the root), as ``agui history --branch``."""
    data, _dropped = _agui.branch_events(encode_events(events), run_id, event, _to(output, format))
    return _events_result(data, output)


def export_artifact(
    events: EventsInput,
    run_id: str,
    *,
    source: Optional[str] = None,
    started_at: Optional[str] = None,
    finished_at: Optional[str] = None,
    output: str = "dict",
    pretty: bool = False,
) -> Any:
    """The compacted message snapshot artifact of one run
    (``agui export-artifact``). ``source``: ``"snapshot"`` or ``"derived"``."""
    check_output(output)
    if output == "model":
        raise ValueError('an artifact has no ag_ui.core model: use output="dict" or "bytes"')
    data: bytes = _agui.export_artifact(
        encode_events(events), run_id, source, started_at, finished_at, pretty
    )
    if output == "bytes":
        return data
    import json

    return json.loads(data)


def validate_artifact(artifact: Any) -> Dict[str, Any]:
    """Strictly validates an artifact (``agui validate-artifact``): returns it
    as a dict, or raises ``AguiArtifactError`` saying why it is malformed."""
    import json

    if isinstance(artifact, (bytes, bytearray, memoryview)):
        data = bytes(artifact)
    elif isinstance(artifact, str):
        data = artifact.encode("utf-8", errors="surrogateescape")
    else:
        data = json.dumps(artifact, ensure_ascii=False).encode("utf-8")
    out: Dict[str, Any] = json.loads(_agui.validate_artifact(data))
    return out


def _pairs(items: List[Tuple[int, str]]) -> List[Dict[str, Any]]:
    return [{"event_index": i, "message_id": m} for (i, m) in items]
