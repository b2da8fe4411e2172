"""Compact a log: verify it, then keep one run envelope that restores it."""

from pathlib import Path
from typing import Any, Dict, List

import agui


def compact_log(path: Path) -> List[Dict[str, Any]]:
    agui.verify_events(path)  # raises AguiVerifyError(index, event_type, reason)
    compacted: List[Dict[str, Any]] = agui.compact_events(path, mode="latest")
    assert agui.reduce(compacted) == agui.reduce(path)
    return compacted


def compact_bytes(ndjson: bytes) -> bytes:
    """The fast path: bytes in, bytes out, exactly what `agui compact` prints."""
    out: bytes = agui.compact_events(ndjson, "deltas", output="bytes", format="ndjson")
    return out
