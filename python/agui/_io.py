"""Conversions between Python values and the encoded streams the native
module works on. Internal: the public names are in ``agui``."""

from __future__ import annotations

import json
import os
from typing import Any, FrozenSet, Iterable, List, Optional, Union

from . import _agui

#: What every function accepts as events.
EventsInput = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]", Iterable[Any]]

_OUTPUTS = ("dict", "bytes", "model")


def check_output(output: str) -> None:
    if output not in _OUTPUTS:
        raise ValueError(f"output must be one of {', '.join(_OUTPUTS)}, not {output!r}")


def _is_model(item: Any) -> bool:
    return hasattr(item, "model_dump_json") and hasattr(type(item), "model_fields")


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text


def _item_text(index: int, item: Any) -> str:
    """One event's JSON text (a dict, an ``ag_ui.core`` model, or JSON text)."""
    if isinstance(item, dict):
        try:
            return _dumps(item)
        except (TypeError, ValueError) as exc:
            raise _agui.AguiDecodeError(f"event #{index}: cannot encode as JSON: {exc}") from exc
    if _is_model(item):
        text: str = item.model_dump_json(by_alias=True, exclude_none=True)
        return text
    if isinstance(item, (bytes, bytearray)):
        return bytes(item).decode("utf-8", errors="surrogateescape")
    if isinstance(item, str):
        return item
    raise _agui.AguiDecodeError(
        f"event #{index}: expected a dict, an ag_ui.core event model or JSON text, "
        f"found {type(item).__name__}"
    )


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: hand it over escaped, the decoder reports it.
        return text.encode("utf-8", errors="backslashreplace")


def encode_events(events: Any) -> bytes:
    """Events in any accepted form as one encoded stream (JSON, NDJSON or SSE)."""
    if isinstance(events, bytes):
        return events
    if isinstance(events, (bytearray, memoryview)):
        return bytes(events)
    if isinstance(events, str):
        return _utf8(events)
    if isinstance(events, os.PathLike):
        data: bytes = _agui.read_file(os.fspath(events))
        return data
    if isinstance(events, dict) or _is_model(events):
        raise _agui.AguiDecodeError(
            "expected a list of events, found a single event (wrap it in a list)"
        )
    try:
        items = events if isinstance(events, (list, tuple)) else list(events)
    except TypeError:
        raise _agui.AguiDecodeError(
            f"expected events as bytes, str, a path or a list, found {type(events).__name__}"
        ) from None
    if all(type(item) is dict for item in items):
        try:
            # One C-level call for the whole list: the fast path.
            return _utf8(_dumps(items))
        except (TypeError, ValueError):
            pass  # find the culprit below, with its index
    return _utf8("[" + ",".join(_item_text(i, item) for i, item in enumerate(items)) + "]")


def encode_start(messages: Optional[Iterable[Any]], state: Any) -> Optional[bytes]:
    if messages is None and state is None:
        return None
    listed: List[Any] = []
    for m in messages or []:
        if _is_model(m):
            listed.append(json.loads(m.model_dump_json(by_alias=True, exclude_none=True)))
        else:
            listed.append(m)
    try:
        return _utf8(_dumps({"messages": listed, "state": state}))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"messages/state cannot be encoded as JSON: {exc}") from exc


_event_adapter: Any = None
_message_adapter: Any = None


def _adapters() -> Any:
    global _event_adapter, _message_adapter
    if _event_adapter is None:
        try:
            from ag_ui.core import Event, Message
            from pydantic import TypeAdapter
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                'output="model" needs the official SDK: pip install "ag-ui-protocol==1.0.0"'
            ) from exc
        _event_adapter = TypeAdapter(Event)
        _message_adapter = TypeAdapter(Message)
    return _event_adapter, _message_adapter


def event_model(event: Any) -> Any:
    """An event dict as its ``ag_ui.core`` model; an event type the SDK does
    not know stays a dict (nothing is dropped)."""
    adapter, _ = _adapters()
    known = _known_types()
    if isinstance(event, dict) and event.get("type") in known:
        return adapter.validate_python(event)
    return event


def message_model(message: Any) -> Any:
    _, adapter = _adapters()
    return adapter.validate_python(message)


_known: Optional[FrozenSet[str]] = None


def _known_types() -> FrozenSet[str]:
    global _known
    if _known is None:
        from ag_ui.core import EventType

        _known = frozenset(t.value for t in EventType)
    return _known


def events_out(json_array: bytes, output: str) -> Any:
    """Decoded events (a JSON array) as dicts or models."""
    events = json.loads(json_array)
    if output == "model":
        return [event_model(e) for e in events]
    return events


def conversation_out(data: bytes, output: str) -> Any:
    if output == "bytes":
        return data
    conversation = json.loads(data)
    if output == "model":
        conversation["messages"] = [message_model(m) for m in conversation["messages"]]
    return conversation
