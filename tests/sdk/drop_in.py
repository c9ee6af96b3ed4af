"""Drop-in proof: the official OpenAI and Anthropic Python SDKs talk to the
proxy exactly as they would to the providers (only base_url changes).

Usage: drop_in.py OPENAI_BASE_URL ANTHROPIC_BASE_URL
Prints one JSON object with the text each call assembled.
"""

import json
import sys

import anthropic
import openai


def main() -> None:
    openai_base, anthropic_base = sys.argv[1], sys.argv[2]
    out = {}

    oa = openai.OpenAI(base_url=openai_base, api_key="sk-test-dropin", max_retries=0, timeout=20)
    messages = [{"role": "user", "content": "Say the scripted text."}]

    stream = oa.chat.completions.create(
        model="gpt-4o-mini",
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts, usage = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
    out["openai_stream"] = "".join(parts)
    out["openai_stream_usage"] = usage

    resp = oa.chat.completions.create(model="gpt-4o-mini", messages=messages)
    out["openai_json"] = resp.choices[0].message.content
    out["openai_json_usage"] = resp.usage.completion_tokens

    an = anthropic.Anthropic(base_url=anthropic_base, api_key="sk-ant-test-dropin", max_retries=0, timeout=20)
    with an.messages.stream(model="claude-3-5-haiku-latest", max_tokens=256, messages=messages) as s:
        out["anthropic_stream"] = "".join(s.text_stream)
        final = s.get_final_message()
        out["anthropic_stream_usage"] = final.usage.output_tokens

    msg = an.messages.create(model="claude-3-5-haiku-latest", max_tokens=256, messages=messages)
    out["anthropic_json"] = "".join(b.text for b in msg.content if b.type == "text")
    out["anthropic_json_usage"] = msg.usage.output_tokens

    print(json.dumps(out))


if __name__ == "__main__":
    main()
