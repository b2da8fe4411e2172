"""The app of the persistence end-to-end test: a real pydantic-ai agent
(offline FunctionModel, no model provider, no network) served by its AG-UI
adapter on FastAPI, wrapped by ``agui.server.persist``.

Behaviour: "tool" in the user's message makes the model call the server-side
tool ``shout`` (arguments streamed), then answer "Tool said: <result>";
"slow" streams the answer with a pause between words (so a client can drop
mid-run); anything else is answered "Echo: <text>" word by word.

Usage: python e2e_app.py PORT STORE_URL
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, AsyncIterator, Dict, List, Optional, Union

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter

import agui
from agui.server import persist


def _words(text: str) -> List[str]:
    out, start = [], 0
    for i, ch in enumerate(text):
        if ch == " " and i > start:
            out.append(text[start:i])
            start = i
    out.append(text[start:])
    return out


def _last_request(messages: List[ModelMessage]) -> Optional[ModelRequest]:
    for m in reversed(messages):
        if isinstance(m, ModelRequest):
            return m
    return None


async def stream(
    messages: List[ModelMessage], info: AgentInfo
) -> AsyncIterator[Union[str, Dict[int, DeltaToolCall]]]:
    req = _last_request(messages)
    parts = list(req.parts) if req else []
    returned = [p for p in parts if isinstance(p, ToolReturnPart)]
    if returned:
        for w in _words(f"Tool said: {returned[-1].content}"):
            yield w
        return
    prompts = [p for p in parts if isinstance(p, UserPromptPart)]
    text: Any = prompts[-1].content if prompts else ""
    if not isinstance(text, str):
        text = " ".join(str(c) for c in text)
    if "tool" in text:
        args = json.dumps({"text": text})
        call_id = f"call-{len(messages)}"
        yield {0: DeltaToolCall(name="shout", json_args=args[:6], tool_call_id=call_id)}
        yield {0: DeltaToolCall(json_args=args[6:])}
        return
    slow = "slow" in text
    for w in _words(f"Echo: {text}"):
        if slow:
            await asyncio.sleep(0.15)
        yield w


agent = Agent(FunctionModel(stream_function=stream), name="e2e")


@agent.tool_plain
def shout(text: str) -> str:
    """Upper-cases the text."""
    return text.upper()


def build(store_url: str) -> Any:
    api = FastAPI()

    @api.post("/agents/e2e/run")
    async def run(request: Request) -> Response:
        return await AGUIAdapter.dispatch_request(request, agent=agent)

    @api.post("/agents/bad/run")
    async def bad(request: Request) -> Response:
        """An endpoint that breaks the protocol as the body's first user
        message asks: "garbage" (a frame that is not JSON), "invalid" (content
        for a message that was never started), "cut" (the stream ends early)."""
        from starlette.responses import StreamingResponse

        body = await request.json()
        thread, run_id = body["threadId"], body["runId"]
        how = body["messages"][-1]["content"]

        async def frames() -> AsyncIterator[bytes]:
            def f(e: Dict[str, Any]) -> bytes:
                return f"data: {json.dumps(e)}\n\n".encode()

            yield f({"type": "RUN_STARTED", "threadId": thread, "runId": run_id})
            yield f({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"})
            yield f({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "partial"})
            if how == "garbage":
                yield b"data: {this is not json\n\n"
            elif how == "invalid":
                yield f({"type": "TEXT_MESSAGE_CONTENT", "messageId": "nobody", "delta": "x"})
            if how != "cut":
                yield f({"type": "TEXT_MESSAGE_END", "messageId": "m1"})
                yield f({"type": "RUN_FINISHED", "threadId": thread, "runId": run_id})

        return StreamingResponse(frames(), media_type="text/event-stream")

    store = agui.AsyncStore(store_url)
    app = persist(api, store, run_path="/agents/e2e/run", agent="e2e")
    return persist(app, store, run_path="/agents/bad/run", agent="bad")


if __name__ == "__main__":
    port, url = int(sys.argv[1]), sys.argv[2]
    uvicorn.run(build(url), host="127.0.0.1", port=port, log_level="warning")
