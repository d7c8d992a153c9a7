// One chat completion through a JavaScript client with its built-in retries, as an IDE
// assistant sends it: openai-node (Continue's chat) or the AI SDK's openai-compatible
// provider (Cline). Prints one JSON line: whether it was served, when, and each
// attempt's status and Retry-After headers.
//
//   CLIENTS_DIR=<folder with node_modules> node retrying_client.js openai|ai-sdk URL MODEL
"use strict";

const { createRequire } = require("node:module");
const path = require("node:path");

const need = createRequire(path.join(process.env.CLIENTS_DIR, "package.json"));
const [kind, baseURL, model] = process.argv.slice(2);
const started = Date.now();
const attempts = [];

async function recordingFetch(url, init) {
  const at = (Date.now() - started) / 1000;
  const response = await fetch(url, init);
  attempts.push({
    at,
    status: response.status,
    retry_after: response.headers.get("retry-after"),
    retry_after_ms: response.headers.get("retry-after-ms"),
  });
  return response;
}

async function viaOpenAI() {
  const OpenAI = need("openai");
  const client = new OpenAI({ baseURL, apiKey: "sk-test", fetch: recordingFetch });
  const reply = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "Explain this function." }],
    max_tokens: 4,
  });
  return reply.choices[0].message.content;
}

async function viaAiSdk() {
  const { createOpenAICompatible } = need("@ai-sdk/openai-compatible");
  const { generateText } = need("ai");
  const provider = createOpenAICompatible({
    name: "saber",
    baseURL,
    apiKey: "sk-test",
    fetch: recordingFetch,
  });
  const result = await generateText({
    model: provider.chatModel(model),
    prompt: "Explain this function.",
    maxOutputTokens: 4,
  });
  return result.text;
}

(kind === "ai-sdk" ? viaAiSdk() : viaOpenAI())
  .then((text) => ({ served: true, text }))
  .catch((error) => ({ served: false, error: String(error && error.message) }))
  .then((outcome) => {
    const elapsed_s = (Date.now() - started) / 1000;
    process.stdout.write(JSON.stringify({ kind, ...outcome, elapsed_s, attempts }) + "\n");
  });
