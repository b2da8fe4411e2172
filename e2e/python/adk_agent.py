"""Google ADK behind the gateway through `ag_ui_adk` (with
`emit_messages_snapshot=True`), driven by an offline scripted model (a
`BaseLlm` subclass: no provider, no network). ADK keeps each thread's
conversation in its own session, keyed by threadId, as a real deployment
does.

Behaviour of the model: it answers "Turn N: <last user text>" streamed word
by word, N being the number of user turns in the session (so a branch that
continued the wrong session says so). A user message containing "tool"
makes it call the tool `shout` first. A message containing "slow" streams
400 more words, 25 ms apart (to be stopped).

Every response that ended before its last byte (the gateway went away) is
appended to the file named by AGUI_E2E_DISCONNECT_LOG.

Usage: python adk_agent.py PORT
"""

import asyncio
import os
import sys
from typing import AsyncGenerator

import uvicorn
from ag_ui_adk import ADKAgent, add_adk_fastapi_endpoint
from fastapi import FastAPI
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types


def shout(text: str) -> str:
    """Upper-cases the text."""
    return text.upper()


def _texts(content):
    return "".join(p.text or "" for p in (content.parts or []) if getattr(p, "text", None))


class ScriptedLlm(BaseLlm):
    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        contents = llm_request.contents or []
        users = [
            c
            for c in contents
            if c.role == "user" and any(getattr(p, "text", None) for p in (c.parts or []))
        ]
        last = contents[-1] if contents else None
        text = _texts(users[-1]) if users else ""
        responses = [
            p.function_response
            for p in ((last.parts or []) if last else [])
            if getattr(p, "function_response", None)
        ]
        if responses:
            answer = f"Tool said: {responses[-1].response.get('result', '')}"
            slow = False
        elif "tool" in text:
            call = types.FunctionCall(name="shout", args={"text": text}, id=f"call-{len(contents)}")
            yield LlmResponse(
                content=types.Content(role="model", parts=[types.Part(function_call=call)]),
                turn_complete=True,
            )
            return
        else:
            answer = f"Turn {len(users)}: {text}"
            slow = "slow" in text
        words = answer.split(" ")
        if slow:
            words += [f"w{i}" for i in range(400)]
        if stream:
            for i, w in enumerate(words):
                if slow:
                    await asyncio.sleep(0.025)
                piece = w if i == 0 else " " + w
                yield LlmResponse(
                    content=types.Content(role="model", parts=[types.Part(text=piece)]),
                    partial=True,
                )
        full = " ".join(words)
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=full)]),
            partial=False,
            turn_complete=True,
        )


root = LlmAgent(
    name="e2e",
    model=ScriptedLlm(),
    instruction="Answer the user.",
    tools=[shout],
)

agent = ADKAgent(
    adk_agent=root,
    app_name="e2e",
    user_id="e2e-user",
    emit_messages_snapshot=True,
    use_thread_id_as_session_id=True,
)

app = FastAPI()
add_adk_fastapi_endpoint(app, agent, path="/")
DISCONNECTS = os.environ.get("AGUI_E2E_DISCONNECT_LOG")


class DisconnectLog:
    """Notes each response that ended before its last byte."""

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


if __name__ == "__main__":
    uvicorn.run(DisconnectLog(app), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
