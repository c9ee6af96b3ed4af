"""The official Anthropic Python SDK through tokentap: plain SDK code.

The SDK reads ANTHROPIC_BASE_URL (pointing at tokentap, e.g.
http://127.0.0.1:8080 — the SDK adds /v1/messages) and ANTHROPIC_API_KEY.
Shows a non-streaming message, a stream, and a tool-use round trip.

    examples/run.sh anthropic
"""

import os
import sys

from anthropic import Anthropic

MODEL = os.environ.get("EXAMPLE_ANTHROPIC_MODEL", "claude-sonnet-4-6")
client = Anthropic()

TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def check(cond: bool, what: str) -> None:
    if not cond:
        sys.exit(f"FAIL: {what}")


def non_streaming() -> None:
    msg = client.messages.create(
        model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "Say hello in five words."}]
    )
    text = "".join(b.text for b in msg.content if b.type == "text")
    print(f"non-streaming: {text[:60]!r}... usage=in {msg.usage.input_tokens} out {msg.usage.output_tokens}")
    check(bool(text), "answer has text")
    check(msg.usage.output_tokens > 0, "usage reported")


def streaming() -> None:
    pieces = 0
    with client.messages.stream(
        model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "Count to ten."}]
    ) as stream:
        for _ in stream.text_stream:
            pieces += 1
        final = stream.get_final_message()
    print(f"streaming: {pieces} text deltas, usage out {final.usage.output_tokens}")
    check(pieces > 0, "stream carried text")
    check(final.usage.output_tokens == pieces, "usage counts the streamed deltas")


def tool_round_trip() -> None:
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    msg = client.messages.create(model=MODEL, max_tokens=256, messages=messages, tools=TOOLS)
    uses = [b for b in msg.content if b.type == "tool_use"]
    if not uses:
        text = "".join(b.text for b in msg.content if b.type == "text")
        print(f"tools: model answered in text: {text[:40]!r}...")
        check(bool(text), "tool request got an answer")
        return
    messages.append({"role": "assistant", "content": msg.content})
    messages.append(
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": u.id, "content": '{"temperature_c": 21, "sky": "clear"}'}
                for u in uses
            ],
        }
    )
    final = client.messages.create(model=MODEL, max_tokens=256, messages=messages, tools=TOOLS)
    text = "".join(b.text for b in final.content if b.type == "text")
    print(f"tools: called {[u.name for u in uses]} -> {text[:40]!r}...")
    check(bool(text), "answer after the tool result")


if __name__ == "__main__":
    print(f"ANTHROPIC_BASE_URL={os.environ.get('ANTHROPIC_BASE_URL')}")
    non_streaming()
    streaming()
    tool_round_trip()
    print("anthropic example: ok")
