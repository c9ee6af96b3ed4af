"""The official openai SDK's realtime client, unchanged, through tokentap.

Usage: realtime.py BASE_URL. Prints one JSON line: the text of the first
response and its usage as the SDK parsed them.
"""

import asyncio
import json
import sys

from openai import AsyncOpenAI


async def main() -> None:
    client = AsyncOpenAI(base_url=sys.argv[1], api_key="sk-sdk-secret")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await conn.session.update(
            session={"type": "realtime", "output_modalities": ["text"]}
        )
        await conn.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Name one planet."}],
            }
        )
        await conn.response.create()
        text = ""
        async for event in conn:
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.done":
                usage = event.response.usage
                print(json.dumps({
                    "text": text,
                    "input_tokens": usage.input_tokens if usage else None,
                    "output_tokens": usage.output_tokens if usage else None,
                }))
                break


asyncio.run(main())
