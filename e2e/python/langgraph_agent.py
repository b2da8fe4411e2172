"""LangGraph behind the gateway through `ag_ui_langgraph`, with an offline
scripted chat model (a `BaseChatModel` subclass: no provider, no network)
and an in-memory checkpointer, so the graph keeps each thread's state
itself, keyed by threadId, as a real LangGraph deployment does.

Behaviour of the model: it answers "Turn N: <last user text>" streamed word
by word, N being the number of user messages in the graph's state (so a
branch that continued the wrong state says so). A user message containing
"tool" makes it call the server-side tool `shout` first. A message
containing "slow" streams 400 words, 25 ms apart (to be stopped).

Every request's disconnect is appended to the file named by
AGUI_E2E_DISCONNECT_LOG (one line per request that ended early).

Usage: python langgraph_agent.py PORT
"""

import asyncio
import json
import os
import sys
from typing import Any, AsyncIterator, Iterator, List, Optional

import uvicorn
from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
from fastapi import FastAPI
from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import MemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode


@tool
def shout(text: str) -> str:
    """Upper-cases the text."""
    return text.upper()


def _text(m: BaseMessage) -> str:
    c = m.content
    if isinstance(c, str):
        return c
    return " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in c)


class ScriptedModel(BaseChatModel):
    """Answers from the conversation alone, deterministically."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        return self

    def _plan(self, messages: List[BaseMessage]):
        users = [m for m in messages if isinstance(m, HumanMessage)]
        last = messages[-1] if messages else None
        text = _text(users[-1]) if users else ""
        if isinstance(last, ToolMessage):
            return ("text", f"Tool said: {_text(last)}", False)
        if "tool" in text:
            return ("tool", text, False)
        return ("text", f"Turn {len(users)}: {text}", "slow" in text)

    def _generate(
        self,
        messages: List[BaseMessage],
        stop: Optional[List[str]] = None,
        run_manager: Optional[CallbackManagerForLLMRun] = None,
        **kwargs: Any,
    ) -> ChatResult:
        kind, text, _ = self._plan(messages)
        if kind == "tool":
            msg = AIMessage(
                content="",
                tool_calls=[{"name": "shout", "args": {"text": text}, "id": f"call-{len(messages)}"}],
            )
        else:
            msg = AIMessage(content=text)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _stream(self, messages, stop=None, run_manager=None, **kwargs) -> Iterator[ChatGenerationChunk]:
        raise NotImplementedError("async only")

    async def _astream(
        self,
        messages: List[BaseMessage],
        stop: Optional[List[str]] = None,
        run_manager: Optional[AsyncCallbackManagerForLLMRun] = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        kind, text, slow = self._plan(messages)
        if kind == "tool":
            args = json.dumps({"text": text})
            call_id = f"call-{len(messages)}"
            for i, piece in enumerate([args[:6], args[6:]]):
                chunk = AIMessageChunk(
                    content="",
                    tool_call_chunks=[
                        {
                            "name": "shout" if i == 0 else None,
                            "args": piece,
                            "id": call_id if i == 0 else None,
                            "index": 0,
                        }
                    ],
                )
                yield ChatGenerationChunk(message=chunk)
            return
        words = text.split(" ")
        if slow:
            words = words + [f"w{i}" for i in range(400)]
        for i, w in enumerate(words):
            if slow:
                await asyncio.sleep(0.025)
            piece = w if i == 0 else " " + w
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager:
                await run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


model = ScriptedModel()


async def call_model(state: MessagesState):
    reply = await model.ainvoke(state["messages"])
    return {"messages": [reply]}


def route(state: MessagesState):
    last = state["messages"][-1]
    return "tools" if getattr(last, "tool_calls", None) else END


builder = StateGraph(MessagesState)
builder.add_node("model", call_model)
builder.add_node("tools", ToolNode([shout]))
builder.add_edge(START, "model")
builder.add_conditional_edges("model", route, ["tools", END])
builder.add_edge("tools", "model")
graph = builder.compile(checkpointer=MemorySaver())

app = FastAPI()
DISCONNECTS = os.environ.get("AGUI_E2E_DISCONNECT_LOG")


class DisconnectLog:
    """Notes each response that ended before its last byte (the client,
    here the gateway, went away)."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not DISCONNECTS:
            return await self.inner(scope, receive, send)
        done = False

        async def watch(message):
            nonlocal done
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                done = True
            await send(message)

        try:
            await self.inner(scope, receive, watch)
        finally:
            if not done:
                with open(DISCONNECTS, "a") as f:
                    f.write("disconnect\n")


add_langgraph_fastapi_endpoint(app, LangGraphAgent(name="e2e", graph=graph, emit_raw_events=False), "/")

if __name__ == "__main__":
    uvicorn.run(DisconnectLog(app), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
