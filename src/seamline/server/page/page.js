// The seamline web page: sessions, a live run view, history, permissions, fork and revert
// (the fleet table is fleet.js).
// Plain script, no build step. It reads runs as seamline events (format=seamline) over
// EventSource, which resumes with Last-Event-ID by itself when the connection drops.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { session: null, run: null, source: null, calls: {}, textNode: null, reasoningNode: null };
const EDIT_TOOLS = ["write_file", "edit_file"];

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
    const error = new Error(message);
    error.shown = true;
    throw error;
  }
  return data;
}

// A handler whose failure is shown once in the notice (the server's message), not thrown on.
function guarded(handler) {
  return async (...args) => {
    try {
      await handler(...args);
    } catch (error) {
      if (!error.shown) notice(String(error.message || error));
    }
  };
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

// A title on one line, at most 80 characters.
function oneLine(text) {
  const flat = String(text || "").replace(/\s+/g, " ").trim();
  return flat.length > 80 ? flat.slice(0, 79) + "…" : flat;
}

function when(seconds) {
  const d = new Date(seconds * 1000);
  const two = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}`;
}

// The row's title (the first line of the first prompt; empty before a first run).
function titleOf(s) {
  return oneLine(s.title || "");
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
    const name = el("td");
    name.append(el("div", "title", titleOf(s) || `${s.provider} · ${when(s.created_at)}`),
      el("div", "muted", `${s.id.slice(0, 12)} · ${when(s.created_at)}`));
    row.append(name, el("td", "", s.provider), el("td", "", s.busy ? "running" : s.status), el("td", "", cost(s.cost_usd)));
    row.addEventListener("click", guarded(() => selectSession(s.id)));
    body.appendChild(row);
  }
}

async function showMeta(id) {
  const s = await api("GET", `/v1/sessions/${id}`);
  state.session = s;
  showTitle(s);
  const parent = s.parent_id ? ` · fork of ${s.parent_id.slice(0, 12)}` : "";
  const where = s.workspace ? ` · in ${s.workspace}` : "";
  $("session-meta").textContent =
    `${s.id.slice(0, 12)} · ${s.provider} ${s.model || ""} · ${s.busy ? "running" : s.status} · ${cost(s.cost_usd)}${parent}${where}`;
  return s;
}

function showTitle(s) {
  $("session-title").textContent = titleOf(s) || `Session ${s.id.slice(0, 12)}`;
}

// A run of this server still going is followed live; otherwise the session's transcript
// (whoever started it: this page, the CLI, another client, a server before a restart) is shown.
async function selectSession(id) {
  const s = await showMeta(id);
  $("session-pane").hidden = false;
  reveal($("session-pane"));
  const latest = s.runs.length ? await api("GET", `/v1/runs/${s.runs[s.runs.length - 1]}`) : null;
  if (latest && (latest.status === "running" || latest.status === "queued")) {
    if (!state.run || state.run.id !== latest.id) follow(latest);
  } else {
    await showHistory(s);
  }
  await loadSessions();
}

// The pane scrolled to the top of the window unless its head is in sight already: it sits
// below the fleet table, which can be screens long.
function reveal(pane) {
  const top = pane.getBoundingClientRect().top;
  if (top < 0 || top > window.innerHeight * 0.75) pane.scrollIntoView({ block: "start" });
}

// Transcript entries as the events a live run shows.
const AS_EVENT = {
  assistant: (e) => ({ type: "text", text: e.content }),
  reasoning: (e) => ({ type: "reasoning", text: e.content }),
  tool_call: (e) => ({ type: "tool_call", call_id: e.call_id, name: e.data.name, arguments: e.data.arguments || {} }),
  tool_result: (e) => ({ type: "tool_result", call_id: e.call_id, output: e.content, is_error: !!e.data.is_error }),
  file_change: (e) => ({ type: "file_change", call_id: e.call_id, path: e.data.path, kind: e.data.change }),
};

async function showHistory(s) {
  if (state.source) state.source.close();
  state.source = null;
  state.run = null;
  state.calls = {};
  state.textNode = state.reasoningNode = null;
  state.streamed = false;
  const { entries } = await api("GET", `/v1/sessions/${s.id}/transcript`);
  if (!state.session || state.session.id !== s.id) return; // another session was chosen meanwhile
  const view = $("run-view");
  view.replaceChildren();
  for (const entry of entries) {
    if (entry.kind === "user") {
      view.appendChild(el("div", "item prompt", entry.content));
      state.textNode = state.reasoningNode = null;
    } else if (AS_EVENT[entry.kind]) {
      show(AS_EVENT[entry.kind](entry));
    } else if (entry.content) {
      view.appendChild(el("div", "item muted", entry.content));
    }
  }
  const turns = new Set(entries.map((e) => e.turn)).size;
  $("cancel-run").disabled = true;
  state.status = null;
  $("run-status").textContent = entries.length ? `history · ${turns} turn${turns === 1 ? "" : "s"}` : "";
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
      // The run view's box: the fleet table lists the same request (with the same data-request).
      const box = view.querySelector(`.permission[data-request="${CSS.escape(event.request_id)}"]`);
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
      guarded(async () => { await showMeta(state.session.id); await loadSessions(); })();
      break;
    default:
      break;
  }
}

function permission(event) {
  const box = el("div", "item permission");
  box.dataset.request = event.request_id;
  box.appendChild(el("span", "", `Allow ${event.tool} ${JSON.stringify(event.arguments)}? ${event.reason || ""} `));
  appendAnswerButtons(box, state.run.id, event.request_id);
  return box;
}

// Approve and Deny for one waiting request of a run (the run view's and the fleet table's).
function appendAnswerButtons(box, runId, requestId, answered) {
  for (const [label, decision] of [["Approve", "allow"], ["Deny", "deny"]]) {
    const button = el("button", "", label);
    button.type = "button";
    button.className = decision === "allow" ? "approve" : "deny";
    button.addEventListener("click", guarded(async (e) => {
      e.stopPropagation();
      await api("POST", `/v1/runs/${runId}/permissions/${encodeURIComponent(requestId)}`, { decision, scope: "once" });
      box.querySelectorAll("button").forEach((b) => { b.disabled = true; });
      if (answered) await answered();
    }));
    box.appendChild(button);
  }
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

$("new-session").addEventListener("submit", guarded(async (e) => {
  e.preventDefault();
  const chosen = $("provider").value;
  const body = { options: parseOptions($("options").value), yes: $("yes").checked };
  if (chosen.startsWith("agent:")) body.agent = chosen.slice("agent:".length);
  else body.provider = chosen;
  if ($("model").value.trim()) body.model = $("model").value.trim();
  if ($("workspace").value.trim()) body.workspace = $("workspace").value.trim();
  const s = await api("POST", "/v1/sessions", body);
  await selectSession(s.id);
}));

$("new-run").addEventListener("submit", guarded(async (e) => {
  e.preventDefault();
  if (!state.session || !$("prompt").value.trim()) return;
  const prompt = $("prompt").value;
  const run = await api("POST", `/v1/sessions/${state.session.id}/runs`, { prompt, busy: $("busy").value });
  $("prompt").value = "";

  follow(run);
  await loadSessions();
}));

$("cancel-run").addEventListener("click", guarded(async () => {
  if (state.run) await api("POST", `/v1/runs/${state.run.id}/cancel`);
}));

$("fork").addEventListener("click", guarded(async () => {
  if (!state.session) return;
  const fork = await api("POST", `/v1/sessions/${state.session.id}/fork`, {});
  state.run = null;
  await selectSession(fork.id);
}));

// Revert asks first. The server reverts from its edit journal, which holds what write_file and
// edit_file changed; it runs shell commands outside the journal, so what they did stays, and so
// does what an agent CLI's own tools did. The dialog names both, from the transcript.
function revertPlan(entries) {
  const edited = new Set();
  const shell = [];
  const outside = new Set();
  const viaEditTool = new Set();
  for (const e of entries) {
    if (e.kind !== "tool_call") continue;
    const args = e.data.arguments || {};
    if (EDIT_TOOLS.includes(e.data.name) && typeof args.path === "string") {
      edited.add(args.path);
      if (e.call_id) viaEditTool.add(e.call_id);
    } else if (e.data.name === "shell") {
      shell.push(String(args.command || ""));
    }
  }
  for (const e of entries) {
    if (e.kind === "file_change" && e.data.change !== "read" && !viaEditTool.has(e.call_id) && !edited.has(e.data.path)) {
      outside.add(e.data.path);
    }
  }
  return { edited: [...edited].sort(), shell, outside: [...outside].sort() };
}

function list(items) {
  const ul = el("ul");
  for (const item of items) ul.appendChild(el("li", "", item));
  return ul;
}

$("revert").addEventListener("click", guarded(async () => {
  if (!state.session) return;
  const { entries } = await api("GET", `/v1/sessions/${state.session.id}/transcript`);
  const plan = revertPlan(entries);
  state.revertPlan = plan;
  const files = $("revert-files");
  files.replaceChildren();
  if (plan.edited.length) {
    files.append(el("p", "", "These files go back to how they were before this session's write_file and edit_file " +
      "calls (from the edit journal; a file already reverted stays as it is):"), list(plan.edited));
  } else {
    files.append(el("p", "", "This session made no write_file or edit_file calls: the edit journal may have nothing to undo."));
  }
  const warning = $("revert-shell");
  warning.replaceChildren(el("span", "", "Changes made by shell commands, which run outside the edit journal, are not undone; " +
    "nor are changes an agent CLI made with its own tools."));
  if (plan.shell.length) {
    warning.append(el("span", "", ` This session ran ${plan.shell.length} shell command(s); what they created, changed or ` +
      "deleted stays:"), list(plan.shell));
  }
  if (plan.outside.length) warning.append(el("span", "", " Changed outside the journal:"), list(plan.outside));
  $("revert-dialog").showModal();
}));

$("revert-cancel").addEventListener("click", () => $("revert-dialog").close());

$("revert-confirm").addEventListener("click", guarded(async () => {
  $("revert-dialog").close();
  if (!state.session) return;
  const plan = state.revertPlan || { shell: [], outside: [] };
  const report = await api("POST", `/v1/sessions/${state.session.id}/revert`, {});
  let text = `reverted ${report.steps_undone} step(s): ${report.restored.join(", ") || "nothing"}`;
  if (plan.shell.length) text += ` · not undone: what ${plan.shell.length} shell command(s) did`;
  if (plan.outside.length) text += ` · left as they are: ${plan.outside.join(", ")}`;
  $("run-view").appendChild(el("div", "item outcome", text));
}));

guarded(async () => { await loadInfo(); await loadSessions(); })();
