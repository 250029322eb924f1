// The seamline web page: sessions, a live run view, permissions, fork and revert.
// Plain script, no build step. It reads runs as seamline events (format=seamline) over
// EventSource, which resumes with Last-Event-ID by itself when the connection drops.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { session: null, run: null, source: null, calls: {}, textNode: null, reasoningNode: null };

async function api(method, path, body) {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const reply = await fetch(path, init);
  const data = await reply.json().catch(() => ({}));
  if (!reply.ok) {
    const message = (data.error && data.error.message) || reply.statusText;
    notice(message);
    throw new Error(message);
  }
  return data;
}

function notice(message) {
  const box = $("notice");
  box.textContent = message;
  box.hidden = false;
  clearTimeout(notice.timer);
  notice.timer = setTimeout(() => { box.hidden = true; }, 6000);
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function cost(value) {
  return value === null || value === undefined ? "unknown" : "$" + Number(value).toFixed(4);
}

function parseOptions(text) {
  const options = {};
  for (const line of text.split("\n")) {
    const at = line.indexOf("=");
    if (at > 0) options[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return options;
}

async function loadInfo() {
  const info = await api("GET", "/v1/info");
  $("server-info").textContent = `v${info.version} · API ${info.api} · AG-UI ${info.agui_protocol_version}`;
  const providers = await api("GET", "/v1/providers?preflight=false");
  const select = $("provider");
  const { agents } = await api("GET", "/v1/agents");
  for (const a of agents) {  // the operator's declared agents come first
    const option = el("option", "", `agent: ${a.name}`);
    option.value = "agent:" + a.name;
    option.title = `${a.provider} ${a.model || ""} · ${a.description || ""}`;
    select.appendChild(option);
  }
  for (const p of providers.providers) {
    const option = el("option", "", p.name);
    option.value = p.name;
    option.title = p.description || "";
    select.appendChild(option);
  }
  select.value = "offline";
}

async function loadSessions() {
  const { sessions } = await api("GET", "/v1/sessions");
  const body = document.querySelector("#sessions tbody");
  body.replaceChildren();
  for (const s of sessions) {
    const row = el("tr");
    row.dataset.id = s.id;
    if (state.session && state.session.id === s.id) row.classList.add("selected");
    row.append(el("td", "", s.id.slice(0, 12)), el("td", "", s.provider), el("td", "", s.busy ? "running" : s.status),
      el("td", "", cost(s.cost_usd)));
    row.addEventListener("click", () => selectSession(s.id));
    body.appendChild(row);
  }
}

async function showMeta(id) {
  const s = await api("GET", `/v1/sessions/${id}`);
  state.session = s;
  $("session-title").textContent = `Session ${s.id.slice(0, 12)}`;
  const parent = s.parent_id ? ` · fork of ${s.parent_id.slice(0, 12)}` : "";
  $("session-meta").textContent = `${s.provider} ${s.model || ""} · ${s.busy ? "running" : s.status} · ${cost(s.cost_usd)}${parent}`;
  return s;
}

async function selectSession(id) {
  const s = await showMeta(id);
  $("session-pane").hidden = false;
  await loadSessions();
  if (s.runs.length && (!state.run || state.run.session_id !== s.id)) {
    follow(await api("GET", `/v1/runs/${s.runs[s.runs.length - 1]}`));
  } else if (!s.runs.length) {
    $("run-view").replaceChildren();
    $("run-status").textContent = "";
  }
}

function follow(run) {
  if (state.source) state.source.close();
  state.run = run;
  state.calls = {};
  state.textNode = state.reasoningNode = null;
  state.streamed = false;
  state.usage = { input: 0, output: 0, cost: 0 };
  const view = $("run-view");
  view.replaceChildren(el("div", "item prompt", run.prompt));
  setRunning(run.status === "running" || run.status === "queued", run.status);
  const source = new EventSource(`/v1/runs/${run.id}/events?format=seamline`);
  state.source = source;
  source.onmessage = (message) => show(JSON.parse(message.data));
  for (const type of ["session", "text_delta", "text", "reasoning_delta", "reasoning", "tool_call", "tool_result",
    "tool_progress", "permission_request", "permission_decision", "file_change", "usage", "mode", "raw", "error",
    "complete"]) {
    source.addEventListener(type, (message) => show(JSON.parse(message.data)));
  }
  source.onerror = () => {
    // The server closes the stream when the run is over; then there is nothing to resume.
    if (state.run && state.run.finished) source.close();
  };
}

function setRunning(running, status) {
  $("cancel-run").disabled = !running;
  state.status = status;
  showStatus();
}

function showStatus() {
  const u = state.usage;
  const spent = u && (u.input || u.output) ? ` · ${u.input} in / ${u.output} out · ${cost(u.cost)}` : "";
  $("run-status").textContent = state.status ? `run ${state.status}${spent}` : "";
}

function show(event) {
  const view = $("run-view");
  switch (event.type) {
    case "session":
      setRunning(true, "running");
      break;
    case "text_delta":
      if (!state.textNode) state.textNode = view.appendChild(el("div", "item text", ""));
      state.textNode.textContent += event.text;
      state.streamed = true;
      break;
    case "text":
      // A text block after deltas closes them (a tool call may have come between).
      if (!state.streamed) view.appendChild(el("div", "item text", event.text));
      state.textNode = null;
      state.streamed = false;
      break;
    case "reasoning_delta":
      if (!state.reasoningNode) state.reasoningNode = view.appendChild(el("div", "item reasoning", ""));
      state.reasoningNode.textContent += event.text;
      break;
    case "reasoning":
      if (!state.reasoningNode) view.appendChild(el("div", "item reasoning", event.text));
      state.reasoningNode = null;
      break;
    case "tool_call":
      state.textNode = null;
      state.calls[event.call_id] = event;
      view.appendChild(el("div", "item tool", `→ ${event.name} ${JSON.stringify(event.arguments)}`));
      break;
    case "tool_result":
      view.appendChild(el("div", event.is_error ? "item tool tool-error" : "item tool", `← ${event.output}`));
      break;
    case "permission_request":
      view.appendChild(permission(event));
      break;
    case "permission_decision": {
      const box = document.querySelector(`[data-request="${CSS.escape(event.request_id)}"]`);
      if (box) {
        box.querySelectorAll("button").forEach((b) => b.remove());
        box.appendChild(el("span", "muted", ` ${event.decision} (${event.scope})`));
      }
      break;
    }
    case "file_change":
      view.appendChild(fileChange(event));
      break;
    case "usage":
      state.usage.input += event.input_tokens;
      state.usage.output += event.output_tokens;
      state.usage.cost = state.usage.cost === null || event.cost_usd === null ? null : state.usage.cost + event.cost_usd;
      showStatus();
      break;
    case "error":
      view.appendChild(el("div", "item error", `${event.kind}: ${event.message}`));
      break;
    case "complete":
      state.run.finished = true;
      if (state.source) state.source.close();
      view.appendChild(el("div", "item outcome", `${event.outcome} (${event.stop_reason})`));
      setRunning(false, event.outcome);
      showMeta(state.session.id);
      loadSessions();
      break;
    default:
      break;
  }
}

function permission(event) {
  const box = el("div", "item permission");
  box.dataset.request = event.request_id;
  box.appendChild(el("span", "", `Allow ${event.tool} ${JSON.stringify(event.arguments)}? ${event.reason || ""} `));
  for (const [label, decision] of [["Approve", "allow"], ["Deny", "deny"]]) {
    const button = el("button", "", label);
    button.type = "button";
    button.className = decision === "allow" ? "approve" : "deny";
    button.addEventListener("click", async () => {
      await api("POST", `/v1/runs/${state.run.id}/permissions/${encodeURIComponent(event.request_id)}`,
        { decision, scope: "once" });
      box.querySelectorAll("button").forEach((b) => { b.disabled = true; });
    });
    box.appendChild(button);
  }
  return box;
}

function lines(text) {
  const out = String(text || "").split("\n");
  if (out.length > 1 && out[out.length - 1] === "") out.pop();
  return out;
}

function fileChange(event) {
  const box = el("div", "item file");
  box.dataset.path = event.path;
  box.appendChild(el("div", "", `${event.kind} ${event.path}`));
  const call = event.call_id ? state.calls[event.call_id] : null;
  if (call && call.name === "write_file") {
    for (const line of lines(call.arguments.content)) box.appendChild(el("div", "diff-add", "+ " + line));
  } else if (call && call.name === "edit_file") {
    for (const line of lines(call.arguments.old)) box.appendChild(el("div", "diff-del", "- " + line));
    for (const line of lines(call.arguments.new)) box.appendChild(el("div", "diff-add", "+ " + line));
  }
  return box;
}

$("new-session").addEventListener("submit", async (e) => {
  e.preventDefault();
  const chosen = $("provider").value;
  const body = { options: parseOptions($("options").value), yes: $("yes").checked };
  if (chosen.startsWith("agent:")) body.agent = chosen.slice("agent:".length);
  else body.provider = chosen;
  if ($("model").value.trim()) body.model = $("model").value.trim();
  const s = await api("POST", "/v1/sessions", body);
  await selectSession(s.id);
});

$("new-run").addEventListener("submit", async (e) => {
  e.preventDefault();
  if (!state.session || !$("prompt").value.trim()) return;
  const run = await api("POST", `/v1/sessions/${state.session.id}/runs`, { prompt: $("prompt").value, busy: $("busy").value });
  $("prompt").value = "";
  follow(run);
  loadSessions();
});

$("cancel-run").addEventListener("click", async () => {
  if (state.run) await api("POST", `/v1/runs/${state.run.id}/cancel`);
});

$("fork").addEventListener("click", async () => {
  if (!state.session) return;
  const fork = await api("POST", `/v1/sessions/${state.session.id}/fork`, {});
  state.run = null;
  await selectSession(fork.id);
});

$("revert").addEventListener("click", async () => {
  if (!state.session) return;
  const report = await api("POST", `/v1/sessions/${state.session.id}/revert`, {});
  $("run-view").appendChild(el("div", "item outcome", `reverted ${report.steps_undone} step(s): ${report.restored.join(", ") || "nothing"}`));
});

loadInfo().then(loadSessions).catch((e) => notice(String(e)));
