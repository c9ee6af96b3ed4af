"""LangChain (langchain-openai) through tokentap, by base URL only.

    examples/run.sh langchain
"""

import os
import sys

from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

llm = ChatOpenAI(
    model=os.environ.get("EXAMPLE_MODEL", "gpt-4o-mini"),
    base_url=os.environ["OPENAI_BASE_URL"],  # tokentap, e.g. http://127.0.0.1:8080/v1
    # Ask for usage in streams, so token counts are exact in tokentap too.
    stream_usage=True,
)

reply = llm.invoke([HumanMessage("Say hello in five words.")])
print(f"invoke: {reply.content[:60]!r}... usage={reply.usage_metadata}")
if not reply.content or not reply.usage_metadata:
    sys.exit("FAIL: invoke returned no content or usage")

chunks = 0
usage = None
for chunk in llm.stream([HumanMessage("Count to ten.")]):
    if chunk.content:
        chunks += 1
    if chunk.usage_metadata:
        usage = chunk.usage_metadata
print(f"stream: {chunks} chunks, usage={usage}")
if chunks == 0 or not usage or usage["output_tokens"] != chunks:
    sys.exit("FAIL: stream carried no content or wrong usage")
print("langchain example: ok")
