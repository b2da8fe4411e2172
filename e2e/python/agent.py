"""A real agent framework behind the gateway: pydantic-ai's AG-UI adapter
(`Agent.to_ag_ui()`), driven by its offline FunctionModel, so it needs no
model provider and no network and answers deterministically.

Behaviour: a user message containing "tool" makes the model call the
server-side tool `shout` (arguments streamed), then answer
"Tool said: <result>"; any other message is answered "Echo: <text>",
streamed word by word.

Usage: python agent.py PORT
"""

import sys

import uvicorn
from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel


def _words(text):
    out, start = [], 0
    for i, ch in enumerate(text):
        if ch == " " and i > start:
            out.append(text[start:i])
            start = i
    out.append(text[start:])
    return out


def _last_request(messages):
    for m in reversed(messages):
        if isinstance(m, ModelRequest):
            return m
    return None


async def stream(messages, info: AgentInfo):
    req = _last_request(messages)
    parts = req.parts if req else []
    returned = [p for p in parts if isinstance(p, ToolReturnPart)]
    if returned:
        for w in _words(f"Tool said: {returned[-1].content}"):
            yield w
        return
    prompts = [p for p in parts if isinstance(p, UserPromptPart)]
    text = prompts[-1].content if prompts else ""
    if not isinstance(text, str):
        text = " ".join(str(c) for c in text)
    if "tool" in text:
        args = '{"text": ' + __import__("json").dumps(text) + "}"
        call_id = f"call-{len(messages)}"
        yield {0: DeltaToolCall(name="shout", json_args=args[:6], tool_call_id=call_id)}
        yield {0: DeltaToolCall(json_args=args[6:])}
        return
    for w in _words(f"Echo: {text}"):
        yield w


agent = Agent(FunctionModel(stream_function=stream), name="e2e")


@agent.tool_plain
def shout(text: str) -> str:
    """Upper-cases the text."""
    return text.upper()


app = agent.to_ag_ui()

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
