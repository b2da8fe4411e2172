"""Persistence for an existing AG-UI endpoint, in-process.

``persist(app, store, run_path=...)`` wraps any ASGI app (Starlette,
FastAPI) whose ``POST run_path`` streams AG-UI events as SSE (pydantic-ai's
``AGUIAdapter.dispatch_request``, ADK's ``add_adk_fastapi_endpoint``,
LangGraph's endpoint, ...) and gives it what ``agui serve`` gives a remote
agent:

- every event the endpoint streams is verified and stored before it is sent,
  and each SSE frame carries ``id: <thread sequence>``;
- the run is driven by its own task: a client that goes away does not stop
  it, and everything is stored to its end;
- ``GET /threads/{id}/messages[?run=RUN_ID]``: ``{"messages", "state",
  "runId"}`` restored from the store's checkpoints;
- ``GET /threads/{id}/events[?after=SEQ]`` (or ``Last-Event-ID``): the stored
  events after that sequence, then the live tail while a run is in flight;
- ``POST <connect_path>``: AG-UI ``connect``, the thread's latest
  conversation as one run envelope, then the live tail of a run in flight.

Bad upstream events are handled as the gateway handles them: the good
events before the bad one are kept, whatever the run has open is ended, and
a ``RUN_ERROR`` with a ``code`` (``upstream_garbage`` for bytes that are not
an event, ``upstream_protocol`` for an event the AG-UI verifier rejects or a
second ``RUN_STARTED``, ``upstream_closed`` for a stream that ends before
the run does, ``upstream_status`` for a non-200 answer) is stored and sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Awaitable, Callable, Dict, List, MutableMapping, Optional, Set, Tuple

from . import _agui
from .store import AsyncStore

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("agui.server")

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def _frame(text: str, seq: Optional[int]) -> bytes:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}data: {text}\n\n".encode("utf-8")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _OpenItems:
    """What a run has open, so it can be ended before a RUN_ERROR."""

    def __init__(self) -> None:
        self.text: List[str] = []
        self.tools: List[str] = []
        self.reasoning_messages: List[str] = []
        self.reasoning: Optional[str] = None

    def track(self, event: Dict[str, Any]) -> None:
        t = event.get("type")
        mid, tid = event.get("messageId"), event.get("toolCallId")
        if t == "TEXT_MESSAGE_START" and isinstance(mid, str):
            self.text.append(mid)
        elif t == "TEXT_MESSAGE_END" and mid in self.text:
            self.text.remove(mid)
        elif t == "TOOL_CALL_START" and isinstance(tid, str):
            self.tools.append(tid)
        elif t == "TOOL_CALL_END" and tid in self.tools:
            self.tools.remove(tid)
        elif t == "REASONING_MESSAGE_START" and isinstance(mid, str):
            self.reasoning_messages.append(mid)
        elif t == "REASONING_MESSAGE_END" and mid in self.reasoning_messages:
            self.reasoning_messages.remove(mid)
        elif t == "REASONING_START":
            self.reasoning = mid if isinstance(mid, str) else ""
        elif t == "REASONING_END":
            self.reasoning = None

    def closers(self) -> List[Dict[str, Any]]:
        out: List[Dict[str, Any]] = []
        out += [{"type": "TEXT_MESSAGE_END", "messageId": m} for m in self.text]
        out += [{"type": "TOOL_CALL_END", "toolCallId": t} for t in self.tools]
        out += [
            {"type": "REASONING_MESSAGE_END", "messageId": m} for m in self.reasoning_messages
        ]
        if self.reasoning is not None:
            out.append({"type": "REASONING_END", "messageId": self.reasoning})
        return out


class _Close(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Run:
    """One run in flight: drives the wrapped endpoint on its own task,
    stores each batch, then hands the framed batch to the client (if any)."""

    def __init__(
        self,
        owner: "AguiPersistence",
        scope: Scope,
        body: bytes,
        thread: str,
        run_id: str,
        head: int,
        parent: Optional[str],
        input_json: str,
    ) -> None:
        self.owner = owner
        self.parent = parent
        self.input_json = input_json
        self.scope = scope
        self.body = body
        self.thread = thread
        self.run_id = run_id
        self.seq = head
        self.started = False
        self.ended = False
        self.open = _OpenItems()
        self.verifier = _agui.Verifier()
        self.decoder = _agui.StreamDecoder("sse")
        self.client: "asyncio.Queue[Optional[Tuple[int, Any]]]" = asyncio.Queue()
        self.status = 200
        self.headers: List[Tuple[bytes, bytes]] = []
        self.passthrough = False
        self.response_started = asyncio.Event()

    # -- the wrapped endpoint's side -------------------------------------

    async def _receive(self) -> Message:
        if self.body is not None:
            body, self.body = self.body, None  # type: ignore[assignment]
            return {"type": "http.request", "body": body, "more_body": False}
        # The run outlives its client: the endpoint never sees a disconnect.
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}  # pragma: no cover

    async def _send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = int(message["status"])
            self.headers = list(message.get("headers", []))
            ctype = dict((k.lower(), v) for k, v in self.headers).get(b"content-type", b"")
            if self.status != 200 or not ctype.startswith(b"text/event-stream"):
                self.passthrough = True
                await self.client.put((0, message))
            self.response_started.set()
        elif kind == "http.response.body":
            if self.passthrough:
                await self.client.put((0, message))
                return
            chunk = message.get("body", b"")
            if chunk and not self.ended:
                await self._chunk(chunk)

    async def _chunk(self, chunk: bytes) -> None:
        try:
            texts = self.decoder.push(chunk)
        except _agui.AguiDecodeError as exc:
            raise _Close(
                "upstream_garbage",
                f"the upstream agent sent frame {getattr(exc, 'index', '?')}, "
                "which is not an AG-UI event",
            ) from exc
        await self._events(texts)

    async def _events(self, texts: List[str]) -> None:
        batch: List[str] = []
        close: Optional[_Close] = None
        for text in texts:
            if self.ended:
                break
            event = json.loads(text)
            if not self.started:
                self.started = True
                if event.get("type") != "RUN_STARTED":
                    batch.append(self._push_own(self._run_started()))
                else:
                    text = self._complete_started(text, event)
            elif event.get("type") == "RUN_STARTED":
                close = _Close(
                    "upstream_protocol",
                    "the upstream agent started a second run in the same stream",
                )
                break
            try:
                self.verifier.push(text)
            except (_agui.AguiVerifyError, _agui.AguiDecodeError) as exc:
                close = _Close(
                    "upstream_protocol",
                    f"the upstream agent sent an event the AG-UI rules reject: {exc}",
                )
                break
            if event.get("type") in ("RUN_FINISHED", "RUN_ERROR"):
                self.ended = True
            self.open.track(event)
            batch.append(text)
        if batch:
            await self._store_and_send(batch)
        if close is not None:
            raise close

    def _run_started(self) -> Dict[str, Any]:
        event: Dict[str, Any] = {"type": "RUN_STARTED", "threadId": self.thread,
                                 "runId": self.run_id}
        if self.parent is not None:
            event["parentRunId"] = self.parent
        event["input"] = json.loads(self.input_json)
        return event

    def _complete_started(self, text: str, event: Dict[str, Any]) -> str:
        """Adds ``parentRunId`` and ``input`` to the endpoint's RUN_STARTED
        when it left them out (or sent null), as the gateway does, so the
        stored thread restores the user's messages too; its text is kept
        otherwise."""
        add_parent = event.get("parentRunId") is None and self.parent is not None
        add_input = event.get("input") is None
        if not add_parent and not add_input:
            return text
        if add_parent:
            event["parentRunId"] = self.parent
        if add_input:
            event["input"] = json.loads(self.input_json)
        return _dumps(event)

    def _push_own(self, event: Dict[str, Any]) -> str:
        """An event the helper writes itself, verified like the others."""
        text = _dumps(event)
        try:
            self.verifier.push(text)
        except _agui.AguiError:
            pass  # closing what is open is always allowed to be stored
        self.open.track(event)
        return text

    async def _store_and_send(self, batch: List[str]) -> None:
        data = ("[" + ",".join(batch) + "]").encode("utf-8")
        done = await self.owner.store.append(
            self.thread, data, expected_seq=self.seq, agent=self.owner.agent
        )
        first = done["first_seq"]
        self.seq = done["last_seq"]
        frames = b"".join(_frame(t, first + i) for i, t in enumerate(batch))
        await self.client.put((1, frames))

    async def _finish_with_error(self, close: _Close) -> None:
        log.warning("run %s of thread %s closed: %s: %s", self.run_id, self.thread,
                    close.code, close.message)
        if self.ended:
            return
        batch: List[str] = []
        if not self.started:
            self.started = True
            batch.append(self._push_own(self._run_started()))
        for closer in self.open.closers():
            batch.append(self._push_own(closer))
        batch.append(_dumps({"type": "RUN_ERROR", "message": close.message, "code": close.code}))
        self.ended = True
        await self._store_and_send(batch)

    async def drive(self) -> None:
        try:
            try:
                await self.owner.app(self.scope, self._receive, self._send)
                if self.passthrough:
                    return
                texts = self.decoder.finish()
                await self._events(texts)
                if not self.ended:
                    raise _Close(
                        "upstream_closed",
                        "the upstream agent closed the stream before ending the run",
                    )
            except _Close as close:
                await self._finish_with_error(close)
            except _agui.AguiDecodeError:
                await self._finish_with_error(
                    _Close("upstream_garbage", "the upstream agent sent bytes that are not an AG-UI event")
                )
            except Exception as exc:  # the endpoint itself failed
                log.exception("the wrapped endpoint failed")
                try:
                    await self._finish_with_error(
                        _Close("upstream_error", f"the agent endpoint failed: {type(exc).__name__}")
                    )
                except Exception:
                    log.exception("cannot record the run's end")
        finally:
            self.response_started.set()
            await self.client.put(None)
            self.owner._running.discard((self.thread, self.run_id))


class AguiPersistence:
    """The ASGI app that ``persist`` returns; see the module docstring."""

    def __init__(
        self,
        app: ASGIApp,
        store: AsyncStore,
        *,
        run_path: str,
        connect_path: Optional[str] = None,
        prefix: str = "",
        agent: Optional[str] = None,
    ) -> None:
        self.app = app
        self.store = store
        self.run_path = run_path
        if connect_path is None:
            connect_path = (
                run_path[: -len("/run")] + "/connect" if run_path.endswith("/run")
                else run_path.rstrip("/") + "/connect"
            )
        self.connect_path = connect_path
        self.prefix = prefix.rstrip("/")
        self.agent = agent
        self._running: Set[Tuple[str, str]] = set()
        self._tasks: Set["asyncio.Task[None]"] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        method: str = scope.get("method", "GET")
        if method == "POST" and path == self.run_path:
            await self._run(scope, receive, send)
            return
        if method == "POST" and path == self.connect_path:
            await self._connect(scope, receive, send)
            return
        threads = self.prefix + "/threads/"
        if method == "GET" and path.startswith(threads):
            rest = path[len(threads):]
            thread, _, what = rest.rpartition("/")
            if thread and what == "messages":
                await self._messages(scope, send, thread)
                return
            if thread and what == "events":
                await self._events(scope, send, thread)
                return
        await self.app(scope, receive, send)

    # -- helpers -----------------------------------------------------------

    @staticmethod
    async def _body(receive: Receive) -> bytes:
        parts = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        return b"".join(parts)

    @staticmethod
    async def _json(send: Send, status: int, value: Any) -> None:
        body = _dumps(value).encode("utf-8")
        await send({
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())],
        })
        await send({"type": "http.response.body", "body": body})

    async def _error(self, send: Send, status: int, code: str, message: str) -> None:
        await self._json(send, status, {"error": {"code": code, "message": message}})

    async def _store_error(self, send: Send, exc: _agui.AguiStoreError) -> None:
        kind = getattr(exc, "kind", "internal")
        status = {"not_found": 404, "conflict": 409, "invalid": 400}.get(kind, 503)
        message = str(exc) if status < 500 else "the store cannot serve this request"
        await self._error(send, status, kind, message)

    async def _runs(self, thread: str) -> List[Dict[str, Any]]:
        runs: List[Dict[str, Any]] = []
        cursor: Optional[str] = None
        while True:
            page = await self.store.runs(thread, limit=1000, cursor=cursor)
            runs += page["runs"]
            cursor = page["next_cursor"]
            if cursor is None:
                return sorted(runs, key=lambda r: int(r["first_seq"]))

    async def _head(self, thread: str) -> int:
        try:
            info = await self.store.thread(thread)
        except _agui.AguiStoreError as exc:
            if getattr(exc, "kind", "") == "not_found":
                return 0
            raise
        return int(info["last_seq"])

    # -- POST run ----------------------------------------------------------

    async def _run(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await self._body(receive)
        try:
            data = json.loads(body)
            thread = data["threadId"]
            run_id = data["runId"]
            if not isinstance(thread, str) or not isinstance(run_id, str) or not thread or not run_id:
                raise ValueError
        except (ValueError, KeyError, TypeError):
            await self._error(send, 400, "invalid_input",
                              "the body must be a RunAgentInput with threadId and runId")
            return
        try:
            if (thread, run_id) in self._running or any(t == thread for t, _ in self._running):
                await self._error(send, 409, "run_in_flight",
                                  "a run of this thread is in flight; attach to it instead")
                return
            parent = data.get("parentRunId")
            if parent is not None and not isinstance(parent, str):
                raise TypeError
            head = await self._head(thread)
            runs = await self._runs(thread) if head else []
            if any(r["run_id"] == run_id for r in runs):
                await self._error(send, 409, "run_exists",
                                  f"run {run_id!r} already exists in this thread; use a new runId")
                return
            if any(r["status"] == "running" for r in runs):
                await self._error(send, 409, "run_in_flight",
                                  "a run of this thread is in flight; attach to it instead")
                return
            if parent is not None and not any(r["run_id"] == parent for r in runs):
                await self._error(send, 422, "unknown_parent_run",
                                  f"parentRunId {parent!r} is not a run of this thread")
                return
            if parent is None and runs:
                parent = runs[-1]["run_id"]
        except TypeError:
            await self._error(send, 400, "invalid_input", "parentRunId must be a string")
            return
        except _agui.AguiStoreError as exc:
            await self._store_error(send, exc)
            return
        run = _Run(self, dict(scope), body, thread, run_id, head, parent, _dumps(data))
        self._running.add((thread, run_id))
        task = asyncio.get_running_loop().create_task(run.drive())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        await run.response_started.wait()
        started = False
        client_gone = False
        while True:
            item = await run.client.get()
            if item is None:
                break
            if client_gone:
                continue
            kind, payload = item
            try:
                if kind == 0:  # the endpoint's own (non-SSE) answer, as is
                    await send(payload)
                    started = payload["type"] == "http.response.start" or started
                    continue
                if not started:
                    await send({"type": "http.response.start", "status": 200,
                                "headers": _SSE_HEADERS})
                    started = True
                await send({"type": "http.response.body", "body": payload, "more_body": True})
            except Exception:
                client_gone = True  # the run goes on without its client
        if client_gone:
            return
        if not started:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        if not run.passthrough:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    # -- GET messages --------------------------------------------------------

    async def _messages(self, scope: Scope, send: Send, thread: str) -> None:
        run = _query(scope).get("run")
        try:
            await self.store.thread(thread)
            found = await self.store.messages_at(thread, run)
        except _agui.AguiStoreError as exc:
            await self._store_error(send, exc)
            return
        if found["run_id"] is None:
            await self._json(send, 200, {"messages": [], "state": None, "runId": None})
            return
        await self._json(send, 200, {"messages": found["messages"], "state": found["state"],
                                     "runId": found["run_id"]})

    # -- GET events ----------------------------------------------------------

    async def _in_flight(self, thread: str) -> bool:
        if any(t == thread for t, _ in self._running):
            return True
        try:
            return any(r["status"] == "running" for r in await self._runs(thread))
        except _agui.AguiStoreError:
            return False

    async def _follow(self, send: Send, thread: str, after: int, prefix: bytes) -> None:
        """Frames after ``after``, until nothing is in flight and the head
        was sent."""
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        if prefix:
            await send({"type": "http.response.body", "body": prefix, "more_body": True})
        head = await self._head(thread)
        last = after
        if last >= head and not await self._in_flight(thread):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        sub = await self.store.subscribe(thread, after=after, output="bytes")
        try:
            while True:
                try:
                    item = await asyncio.wait_for(sub.__anext__(), timeout=0.5)
                except asyncio.TimeoutError:
                    head = max(head, await self._head(thread))
                    if last >= head and not await self._in_flight(thread):
                        break
                    continue
                except StopAsyncIteration:
                    break
                text = item["event"].decode("utf-8")
                last = item["seq"]
                await send({"type": "http.response.body", "body": _frame(text, last),
                            "more_body": True})
                if json.loads(text).get("type") in ("RUN_FINISHED", "RUN_ERROR"):
                    head = max(head, await self._head(thread))
                    if last >= head and not await self._in_flight(thread):
                        break
        except Exception:
            return  # the client went away
        finally:
            await sub.aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _events(self, scope: Scope, send: Send, thread: str) -> None:
        query = _query(scope)
        after_text = _header(scope, b"last-event-id") or query.get("after") or "0"
        try:
            after = int(after_text.strip())
            if after < 0:
                raise ValueError
        except ValueError:
            await self._error(send, 400, "invalid_last_event_id",
                              "Last-Event-ID must be a sequence number")
            return
        try:
            await self.store.thread(thread)
        except _agui.AguiStoreError as exc:
            await self._store_error(send, exc)
            return
        await self._follow(send, thread, after, b"")

    # -- POST connect --------------------------------------------------------

    async def _connect(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await self._body(receive)
        try:
            data = json.loads(body)
            thread, run_id = data["threadId"], data["runId"]
            if not isinstance(thread, str) or not isinstance(run_id, str):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            await self._error(send, 400, "invalid_input",
                              "the body must be a RunAgentInput with threadId and runId")
            return
        try:
            runs = await self._runs(thread) if await self._head(thread) else []
            running = runs[-1] if runs and runs[-1]["status"] == "running" else None
            if running is not None:
                ids = {r["run_id"] for r in runs}
                parent = running.get("parent_run_id")
                base = parent if parent in ids else None
            else:
                base = runs[-1]["run_id"] if runs else None
            frames = [_dumps({"type": "RUN_STARTED", "threadId": thread, "runId": run_id})]
            last_seq = 0
            if base is not None:
                found = await self.store.messages_at(thread, base)
                last_seq = int(found["last_seq"])
                frames.append(_dumps({"type": "MESSAGES_SNAPSHOT", "messages": found["messages"]}))
                if found["state"] is not None:
                    frames.append(_dumps({"type": "STATE_SNAPSHOT", "snapshot": found["state"]}))
            frames.append(_dumps({"type": "RUN_FINISHED", "threadId": thread, "runId": run_id}))
        except _agui.AguiStoreError as exc:
            await self._store_error(send, exc)
            return
        prefix = b"".join(_frame(f, None) for f in frames)
        if running is None:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            await send({"type": "http.response.body", "body": prefix, "more_body": False})
            return
        start = max(int(running["first_seq"]) - 1, 0)
        del last_seq
        await self._follow(send, thread, start, prefix)


def _query(scope: Scope) -> Dict[str, str]:
    from urllib.parse import parse_qsl

    raw = scope.get("query_string", b"").decode("latin-1")
    return dict(parse_qsl(raw))


def _header(scope: Scope, name: bytes) -> Optional[str]:
    for k, v in scope.get("headers", []):
        if k.lower() == name:
            text: str = v.decode("latin-1")
            return text
    return None


def persist(
    app: ASGIApp,
    store: AsyncStore,
    *,
    run_path: str,
    connect_path: Optional[str] = None,
    prefix: str = "",
    agent: Optional[str] = None,
) -> AguiPersistence:
    """Wraps ``app`` so that its AG-UI endpoint at ``POST run_path`` is
    persisted in ``store`` (see the module docstring). Returns the ASGI app
    to serve instead of ``app``::

        app = FastAPI()
        app.post("/agent/run")(my_ag_ui_endpoint)
        app = persist(app, AsyncStore("sqlite:///agui.db"), run_path="/agent/run")
    """
    return AguiPersistence(
        app, store, run_path=run_path, connect_path=connect_path, prefix=prefix, agent=agent
    )
