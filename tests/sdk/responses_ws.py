"""The official openai SDK's Responses WebSocket client, unchanged, through
tokentap.

Usage: responses_ws.py BASE_URL. Sends one `response.create` and prints one
JSON line: the id and usage of the response as the SDK parsed them.
"""

import asyncio
import json
import sys

from openai import AsyncOpenAI


async def main() -> None:
    client = AsyncOpenAI(base_url=sys.argv[1], api_key="sk-sdk-secret")
    async with client.responses.connect() as conn:
        await conn.response.create(
            model="gpt-5.2", store=False, input="What is the weather in Oslo?"
        )
        async for event in conn:
            if event.type == "response.completed":
                usage = event.response.usage
                print(json.dumps({
                    "id": event.response.id,
                    "input_tokens": usage.input_tokens if usage else None,
                    "output_tokens": usage.output_tokens if usage else None,
                }))
                break


asyncio.run(main())
