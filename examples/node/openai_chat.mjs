// The official OpenAI Node SDK through tokentap. The code is ordinary SDK
// code: the SDK reads OPENAI_BASE_URL (pointing at tokentap) and
// OPENAI_API_KEY from the environment, exactly as without the proxy.
//
//   examples/run.sh node        (starts `tokentap simulate` + tokentap)
//   OPENAI_BASE_URL=http://127.0.0.1:8080/v1 node openai_chat.mjs
import OpenAI from "openai";

const client = new OpenAI();
const model = process.env.EXAMPLE_MODEL ?? "gpt-4o-mini";
const messages = [{ role: "user", content: "Say hello in five words." }];

function check(cond, what) {
  if (!cond) {
    console.error(`FAIL: ${what}`);
    process.exit(1);
  }
}

// Non-streaming: one JSON body; tokentap records TTFT = time to the body.
const res = await client.chat.completions.create({ model, messages });
const text = res.choices[0].message.content ?? "";
console.log(`non-streaming: ${JSON.stringify(text.slice(0, 60))}... usage=${JSON.stringify(res.usage)}`);
check(text.length > 0, "non-streaming answer has content");
check(res.usage?.completion_tokens > 0, "non-streaming answer reports usage");

// Streaming, with usage in the last chunk (exact token counts for tokentap).
const t0 = performance.now();
let ttftMs;
let chunks = 0;
let streamed = "";
let usage;
const stream = await client.chat.completions.create({
  model,
  messages,
  stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  const delta = chunk.choices[0]?.delta?.content;
  if (delta) {
    ttftMs ??= performance.now() - t0;
    chunks++;
    streamed += delta;
  }
  if (chunk.usage) usage = chunk.usage;
}
console.log(`streaming: ${chunks} content chunks, client-side TTFT ${ttftMs?.toFixed(0)} ms, usage=${JSON.stringify(usage)}`);
check(chunks > 0, "stream carried content chunks");
check(usage?.completion_tokens === chunks, "usage chunk counts the streamed tokens");
console.log("node example: ok");
