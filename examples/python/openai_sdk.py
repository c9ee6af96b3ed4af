"""The official OpenAI Python SDK through tokentap: plain SDK code.

The SDK reads OPENAI_BASE_URL (pointing at tokentap, e.g.
http://127.0.0.1:8080/v1) and OPENAI_API_KEY from the environment; nothing
else changes. Shows a non-streaming call, a stream with usage, and a tool
call round trip (streaming and not).

    examples/run.sh openai
"""

import json
import os
import sys
import time

from openai import OpenAI

MODEL = os.environ.get("EXAMPLE_MODEL", "gpt-4o-mini")
client = OpenAI()

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def get_weather(city: str = "Paris") -> dict:
    return {"city": city, "temperature_c": 21, "sky": "clear"}


def check(cond: bool, what: str) -> None:
    if not cond:
        sys.exit(f"FAIL: {what}")


def non_streaming() -> None:
    res = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello in five words."}]
    )
    text = res.choices[0].message.content or ""
    print(f"non-streaming: {text[:60]!r}... usage={res.usage.model_dump() if res.usage else None}")
    check(bool(text), "non-streaming answer has content")
    check(res.usage is not None and res.usage.completion_tokens > 0, "usage reported")


def streaming() -> None:
    t0 = time.perf_counter()
    ttft = None
    chunks = 0
    usage = None
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Count to ten."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            ttft = ttft or time.perf_counter() - t0
            chunks += 1
        if chunk.usage:
            usage = chunk.usage
    print(f"streaming: {chunks} content chunks, client-side TTFT {ttft * 1000:.0f} ms, usage={usage.model_dump() if usage else None}")
    check(chunks > 0, "stream carried content")
    check(usage is not None and usage.completion_tokens == chunks, "usage chunk counts the streamed tokens")


def tool_round_trip(stream: bool) -> None:
    """Ask with tools; if the model calls one, run it and send the result back."""
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    kind = "streaming" if stream else "non-streaming"
    if stream:
        calls: dict[int, dict] = {}
        text = ""
        for chunk in client.chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS, stream=True
        ):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            text += delta.content or ""
            for tc in delta.tool_calls or []:
                c = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                c["id"] = tc.id or c["id"]
                if tc.function:
                    c["name"] += tc.function.name or ""
                    c["arguments"] += tc.function.arguments or ""
        tool_calls = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(calls.items())
        ]
    else:
        msg = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS).choices[0].message
        text = msg.content or ""
        tool_calls = [tc.model_dump() for tc in msg.tool_calls or []]
    if not tool_calls:
        # The provider chose to answer in text (the simulator without tool
        # support does); the request, tools included, still went through.
        print(f"tools ({kind}): model answered in text: {text[:40]!r}...")
        check(bool(text), "tool request got an answer")
        return
    messages.append({"role": "assistant", "content": text or None, "tool_calls": tool_calls})
    for tc in tool_calls:
        check(tc["function"]["name"] == "get_weather", f"called a known tool, got {tc['function']['name']}")
        args = json.loads(tc["function"]["arguments"] or "{}")
        result = get_weather(**args)
        messages.append({"role": "tool", "tool_call_id": tc["id"], "content": json.dumps(result)})
    final = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    answer = final.choices[0].message.content or ""
    print(f"tools ({kind}): called {[tc['function']['name'] for tc in tool_calls]} -> {answer[:40]!r}...")
    check(bool(answer), "answer after the tool result")


if __name__ == "__main__":
    print(f"OPENAI_BASE_URL={os.environ.get('OPENAI_BASE_URL')}")
    non_streaming()
    streaming()
    tool_round_trip(stream=False)
    tool_round_trip(stream=True)
    print("openai example: ok")
