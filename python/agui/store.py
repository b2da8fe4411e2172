"""Durable event stores: the CLI's and the gateway's backends, by URL.

``memory://``, ``file:///DIR``, ``sqlite:///PATH`` and
``postgres://USER@HOST:PORT/DB`` open the same backends as
``agui store --store URL`` and ``agui serve --store URL``, so a Python app
and ``agui`` can share one database (PostgreSQL: concurrently; SQLite: one
writing process at a time).
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

from . import _agui
from ._io import EventsInput, check_output, encode_events, event_model, message_model

DEFAULT_TENANT = "default"

_Stored = Tuple[int, int, str]


def _event(text: str, output: str) -> Any:
    if output == "bytes":
        return text.encode("utf-8")
    value = json.loads(text)
    return event_model(value) if output == "model" else value


def _stored(items: List[_Stored], output: str) -> List[Dict[str, Any]]:
    return [
        {"seq": seq, "received_at": at, "event": _event(text, output)}
        for (seq, at, text) in items
    ]


def _conversation(found: Optional[Tuple[str, int, str]], output: str) -> Dict[str, Any]:
    if found is None:
        return {"messages": [], "state": {}, "run_id": None, "last_seq": 0}
    run_id, last_seq, text = found
    conversation: Dict[str, Any] = json.loads(text)
    if output == "model":
        conversation["messages"] = [message_model(m) for m in conversation["messages"]]
    conversation["run_id"] = run_id
    conversation["last_seq"] = last_seq
    return conversation


def _page(items: List[str], cursor: Optional[str], key: str) -> Dict[str, Any]:
    return {key: [json.loads(t) for t in items], "next_cursor": cursor}


class Store:
    """A store opened by URL, for synchronous code. Every call blocks the
    calling thread, not the interpreter (the GIL is released while it waits).

    Events are appended and read per thread, each with a sequence number
    (from 1). ``tenant`` scopes everything, as in the gateway.

    Errors raise ``AguiStoreError`` with ``kind`` (``not_found``,
    ``conflict``, ``invalid``, ``unavailable``, ``corrupt``, ``unsupported``,
    ``internal``); a closed store raises it with ``kind="unavailable"``.
    """

    def __init__(self, url: str, *, tenant: str = DEFAULT_TENANT) -> None:
        self._native = _agui.NativeStore.open(url)
        self.tenant = tenant

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def append(
        self,
        thread: str,
        events: EventsInput,
        *,
        expected_seq: Optional[int] = None,
        agent: Optional[str] = None,
        durable: bool = False,
    ) -> Dict[str, int]:
        """Appends a batch atomically; returns ``{"first_seq", "last_seq"}``.
        With ``expected_seq`` (the thread's last sequence as the caller saw
        it, 0 for empty) a mismatch raises ``kind="conflict"`` and writes
        nothing. ``durable``: flushed to stable storage before returning."""
        first, last = self._native.append(
            self.tenant, thread, encode_events(events), expected_seq, agent, durable
        )
        return {"first_seq": first, "last_seq": last}

    def read(
        self, thread: str, *, after: int = 0, limit: int = 1000, output: str = "dict"
    ) -> Dict[str, Any]:
        """One page of a thread: ``{"events": [{"seq", "received_at",
        "event"}], "next_after"}``; pass ``next_after`` back as ``after`` for
        the next page (``None``: no more)."""
        check_output(output)
        items, next_seq = self._native.read(self.tenant, thread, after, limit)
        return {
            "events": _stored(items, output),
            "next_after": None if next_seq is None else next_seq - 1,
        }

    def events(self, thread: str, *, after: int = 0, output: str = "dict") -> List[Any]:
        """Every event of a thread after sequence ``after``, without the
        sequence numbers (as a list of events for the other functions)."""
        check_output(output)
        items = self._native.read_all(self.tenant, thread, after)
        return [_event(text, output) for (_, _, text) in items]

    def read_run(self, thread: str, run_id: str, *, output: str = "dict") -> List[Dict[str, Any]]:
        """The events of one run."""
        check_output(output)
        return _stored(self._native.read_run(self.tenant, thread, run_id), output)

    def read_branch(
        self, thread: str, run_id: str, *, output: str = "dict"
    ) -> List[Dict[str, Any]]:
        """The events of the branch ending at ``run_id``: the thread's
        preamble, then each run from the root."""
        check_output(output)
        return _stored(self._native.read_branch(self.tenant, thread, run_id), output)

    def messages_at(
        self, thread: str, run: Optional[str] = None, *, output: str = "dict"
    ) -> Dict[str, Any]:
        """``{"messages", "state", "run_id", "last_seq"}`` at the end of
        ``run`` (default: the thread's last run), restored from the stored
        checkpoints (rebuilt from the log when one is missing or damaged)."""
        check_output(output)
        return _conversation(self._native.messages_at(self.tenant, thread, run), output)

    def thread(self, thread: str) -> Dict[str, Any]:
        """A thread's summary (``last_seq``, ``run_count``, ``bytes``, ...)."""
        info: Dict[str, Any] = json.loads(self._native.thread(self.tenant, thread))
        return info

    def threads(
        self, *, limit: int = 100, cursor: Optional[str] = None, agent: Optional[str] = None
    ) -> Dict[str, Any]:
        """A page of threads, most recently active first:
        ``{"threads": [...], "next_cursor"}``."""
        items, nxt = self._native.threads(self.tenant, agent, limit, cursor)
        return _page(items, nxt, "threads")

    def runs(
        self, thread: Optional[str] = None, *, limit: int = 100, cursor: Optional[str] = None
    ) -> Dict[str, Any]:
        """A page of runs (of one thread, or all), oldest first:
        ``{"runs": [...], "next_cursor"}``."""
        items, nxt = self._native.runs(self.tenant, thread, limit, cursor)
        return _page(items, nxt, "runs")

    def delete(self, thread: str) -> None:
        """Deletes a thread and everything of it."""
        self._native.delete(self.tenant, thread)

    def ready(self) -> None:
        """Returns when the store takes writes; raises ``AguiStoreError``
        with ``kind="unavailable"`` and the reason otherwise: closed, a
        SQLite or file store whose flush to disk failed (it refuses writes
        until reopened), a PostgreSQL database that does not answer. For
        readiness probes."""
        self._native.ready()

    def close(self) -> None:
        """Flushes and closes; later calls raise ``kind="unavailable"``."""
        self._native.close()


class Subscription:
    """``async for stored in subscription``: committed events first, then
    live ones, each exactly once and in order."""

    def __init__(self, native: Any, output: str) -> None:
        self._native = native
        self._output = output

    def __aiter__(self) -> "Subscription":
        return self

    async def __anext__(self) -> Dict[str, Any]:
        seq, at, text = await self._native.__anext__()
        return {"seq": seq, "received_at": at, "event": _event(text, self._output)}

    async def aclose(self) -> None:
        """Ends the subscription."""
        await self._native.close()


class AsyncStore:
    """The asyncio form of ``Store`` (same methods, awaited), plus
    ``subscribe``. ``AsyncStore(url)`` opens at once;
    ``await AsyncStore.connect(url)`` opens without blocking the loop."""

    def __init__(self, url: Optional[str] = None, *, tenant: str = DEFAULT_TENANT,
                 _native: Any = None) -> None:
        if _native is None:
            if url is None:
                raise ValueError("AsyncStore needs a store URL")
            _native = _agui.NativeStore.open(url)
        self._native = _native
        self.tenant = tenant

    @classmethod
    async def connect(cls, url: str, *, tenant: str = DEFAULT_TENANT) -> "AsyncStore":
        native = await _agui.NativeStore.open_async(url)
        return cls(tenant=tenant, _native=native)

    async def __aenter__(self) -> "AsyncStore":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def append(
        self,
        thread: str,
        events: EventsInput,
        *,
        expected_seq: Optional[int] = None,
        agent: Optional[str] = None,
        durable: bool = False,
    ) -> Dict[str, int]:
        """See ``Store.append``."""
        first, last = await self._native.append_async(
            self.tenant, thread, encode_events(events), expected_seq, agent, durable
        )
        return {"first_seq": first, "last_seq": last}

    async def read(
        self, thread: str, *, after: int = 0, limit: int = 1000, output: str = "dict"
    ) -> Dict[str, Any]:
        """See ``Store.read``."""
        check_output(output)
        items, next_seq = await self._native.read_async(self.tenant, thread, after, limit)
        return {
            "events": _stored(items, output),
            "next_after": None if next_seq is None else next_seq - 1,
        }

    async def events(self, thread: str, *, after: int = 0, output: str = "dict") -> List[Any]:
        """See ``Store.events``."""
        check_output(output)
        items = await self._native.read_all_async(self.tenant, thread, after)
        return [_event(text, output) for (_, _, text) in items]

    async def read_run(
        self, thread: str, run_id: str, *, output: str = "dict"
    ) -> List[Dict[str, Any]]:
        """See ``Store.read_run``."""
        check_output(output)
        return _stored(await self._native.read_run_async(self.tenant, thread, run_id), output)

    async def read_branch(
        self, thread: str, run_id: str, *, output: str = "dict"
    ) -> List[Dict[str, Any]]:
        """See ``Store.read_branch``."""
        check_output(output)
        return _stored(await self._native.read_branch_async(self.tenant, thread, run_id), output)

    async def messages_at(
        self, thread: str, run: Optional[str] = None, *, output: str = "dict"
    ) -> Dict[str, Any]:
        """See ``Store.messages_at``."""
        check_output(output)
        found = await self._native.messages_at_async(self.tenant, thread, run)
        return _conversation(found, output)

    async def thread(self, thread: str) -> Dict[str, Any]:
        """See ``Store.thread``."""
        info: Dict[str, Any] = json.loads(await self._native.thread_async(self.tenant, thread))
        return info

    async def threads(
        self, *, limit: int = 100, cursor: Optional[str] = None, agent: Optional[str] = None
    ) -> Dict[str, Any]:
        """See ``Store.threads``."""
        items, nxt = await self._native.threads_async(self.tenant, agent, limit, cursor)
        return _page(items, nxt, "threads")

    async def runs(
        self, thread: Optional[str] = None, *, limit: int = 100, cursor: Optional[str] = None
    ) -> Dict[str, Any]:
        """See ``Store.runs``."""
        items, nxt = await self._native.runs_async(self.tenant, thread, limit, cursor)
        return _page(items, nxt, "runs")

    async def delete(self, thread: str) -> None:
        """See ``Store.delete``."""
        await self._native.delete_async(self.tenant, thread)

    async def ready(self) -> None:
        """See ``Store.ready``."""
        await self._native.ready_async()

    async def close(self) -> None:
        """See ``Store.close``."""
        await self._native.close_async()

    async def subscribe(
        self, thread: str, *, after: int = 0, output: str = "dict"
    ) -> Subscription:
        """Events of ``thread`` after sequence ``after``: the stored ones,
        then every later append, with no gap and no duplicate. The thread
        need not exist yet; the iteration ends when it is deleted or the
        store closes."""
        check_output(output)
        native = await self._native.subscribe_async(self.tenant, thread, after)
        return Subscription(native, output)

    def iter_events(self, thread: str, *, after: int = 0) -> AsyncIterator[Dict[str, Any]]:
        """``async for`` over ``subscribe`` in one step."""

        async def gen() -> AsyncIterator[Dict[str, Any]]:
            sub = await self.subscribe(thread, after=after)
            try:
                async for item in sub:
                    yield item
            finally:
                await sub.aclose()

        return gen()
