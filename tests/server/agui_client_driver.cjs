// Drives the official AG-UI client (@ag-ui/client, installed by scripts/system/47-agui-client.sh)
// for tests/server/test_agui_client.py. Reads one JSON request on stdin, prints one JSON answer.
//   {"mode": "verify", "events": [...]}       the events through verifyEvents: {"ok", "error"}
//   {"mode": "run", "url", "threadId", "steps": [{"message", "forwardedProps"} | {"resume": "allow"|"deny"}]}
//       one HttpAgent on that thread; per step runAgent (a user message, or a resume answering
//       every pending interrupt): {"steps": [{"events", "result", "interrupts", "error"}], "messages"}
"use strict";
const path = require("node:path");
const { createRequire } = require("node:module");

const home = process.env.AGUI_CLIENT_DIR;
if (!home) throw new Error("set AGUI_CLIENT_DIR to the folder scripts/system/47-agui-client.sh installs");
const need = createRequire(path.join(path.resolve(home), "package.json"));
const { HttpAgent, verifyEvents } = need("@ag-ui/client");
const { from, lastValueFrom } = need("rxjs");
const { toArray } = need("rxjs/operators");

async function verify(events) {
  try {
    await lastValueFrom(from(events).pipe(verifyEvents(false), toArray()));
    return { ok: true, error: null };
  } catch (err) {
    return { ok: false, error: String(err && err.message ? err.message : err) };
  }
}

async function run(request) {
  const agent = new HttpAgent({ url: request.url, threadId: request.threadId, headers: request.headers || {} });
  const steps = [];
  let n = 0;
  for (const step of request.steps) {
    const events = [];
    const params = { forwardedProps: step.forwardedProps || {} };
    if (step.runId) params.runId = step.runId;
    if (step.resume) {
      params.resume = agent.pendingInterrupts.map((item) => ({
        interruptId: item.id,
        status: step.resume === "cancel" ? "cancelled" : "resolved",
        payload: step.resume === "cancel" ? undefined : { decision: step.resume },
      }));
    } else {
      n += 1;
      agent.addMessage({ id: `user-${n}`, role: "user", content: step.message });
    }
    const out = { events, result: null, interrupts: [], error: null };
    try {
      const done = await agent.runAgent(params, { onEvent: ({ event }) => { events.push(event); } });
      out.result = done.result === undefined ? null : done.result;
    } catch (err) {
      out.error = String(err && err.message ? err.message : err);
    }
    out.interrupts = agent.pendingInterrupts;
    out.verified = await verify(events);
    steps.push(out);
    if (out.error) break;
  }
  return { steps, messages: agent.messages };
}

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const request = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  const answer = request.mode === "verify" ? await verify(request.events) : await run(request);
  process.stdout.write(JSON.stringify(answer) + "\n");
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(2);
});
