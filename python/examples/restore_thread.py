"""Restore a thread from a durable store, and time-travel to an earlier run."""

from typing import Any, Dict, List

import agui


def restore(url: str, thread: str, events: List[Dict[str, Any]]) -> Dict[str, Any]:
    with agui.Store(url) as store:
        store.append(thread, events)
        conversation: Dict[str, Any] = store.messages_at(thread)  # the last run
        first_run: str = store.runs(thread)["runs"][0]["run_id"]
        earlier: Dict[str, Any] = store.messages_at(thread, first_run)
        assert earlier["last_seq"] <= conversation["last_seq"]
        return conversation


async def follow(url: str, thread: str) -> int:
    """Catch up on a thread, then follow it live (no gap, no duplicate)."""
    store = await agui.AsyncStore.connect(url)
    seen = 0
    sub = await store.subscribe(thread, after=0)
    async for stored in sub:
        seen = int(stored["seq"])
        if stored["event"]["type"] in ("RUN_FINISHED", "RUN_ERROR"):
            break
    await sub.aclose()
    await store.close()
    return seen
