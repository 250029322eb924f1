// The fleet view of the seamline page: every live and recent run of this server's store in one
// table (backend, model, status, current tool, tokens, cost, worktree branch and state, waiting
// approvals), read again every few seconds; per worktree run Diff, Merge and Discard.
// Loaded after page.js and uses its helpers ($, api, el, cost, guarded, titleOf, selectSession,
// appendAnswerButtons). Server text only ever goes in through textContent.
"use strict";

const FLEET_EVERY_MS = 2000;
const FLEET_LIVE = ["running", "queued", "open"];
const fleet = { rows: new Map(), busy: false, again: false, pending: null };

// The same rows as `seamline watch --url`: each session with its latest run on this server
// (a session with no prompt yet is left out), live ones first, then the newest.
async function fleetRows() {
  const { sessions } = await quietApi("/v1/sessions?limit=100");
  const { runs } = await quietApi("/v1/runs");
  const latest = {};
  for (const run of [...runs].sort((a, b) => a.created_at - b.created_at)) {
    if (run.session_id) latest[run.session_id] = run;
  }
  const rows = sessions.filter((s) => s.status !== "not_started").map((s) => fleetRow(s, latest[s.id] || null));
  rows.sort((a, b) => (FLEET_LIVE.includes(a.status) ? 0 : 1) - (FLEET_LIVE.includes(b.status) ? 0 : 1)
    || b.created_at - a.created_at);
  return rows.slice(0, 50);
}

function fleetRow(session, run) {
  const tree = (session.run_options && session.run_options.worktree) || {};
  return {
    id: session.id,
    runId: run ? run.id : null,
    title: titleOf(session),
    provider: session.provider,
    model: session.model || "default",
    status: run ? run.status : session.status,
    tool: (run && run.current_tool) || "",
    pending: run ? run.pending_permissions : [],
    tokens: `${session.input_tokens} in / ${session.output_tokens} out`,
    cost: cost(session.cost_usd),
    branch: tree.branch || "",
    worktree: tree.state || "",
    created_at: session.created_at,
  };
}

// A poll's failure (the server gone for a moment) is not worth a notice each time.
async function quietApi(path) {
  const reply = await fetch(path);
  if (!reply.ok) throw new Error(`${path}: ${reply.status}`);
  return reply.json();
}

// One read at a time; a refresh asked for meanwhile (after a merge, say) runs right after it.
async function refreshFleet() {
  if (fleet.busy) {
    fleet.again = true;
    return;
  }
  fleet.busy = true;
  try {
    do {
      fleet.again = false;
      drawFleet(await fleetRows());
      $("fleet-status").textContent = `updated ${new Date().toLocaleTimeString()}`;
    } while (fleet.again);
  } catch (error) {
    $("fleet-status").textContent = `not updated: ${error.message}`;
  } finally {
    fleet.busy = false;
  }
}

// Rows are kept by session id and redrawn only when what they show changed, so a button
// stays under the pointer between polls.
function drawFleet(rows) {
  const body = document.querySelector("#fleet tbody");
  const seen = new Set();
  let before = null;
  for (const row of [...rows].reverse()) {
    seen.add(row.id);
    const signature = JSON.stringify(row);
    let kept = fleet.rows.get(row.id);
    if (!kept || kept.signature !== signature) {
      const tr = fleetTr(row);
      if (kept) kept.tr.replaceWith(tr);
      kept = { tr, signature };
      fleet.rows.set(row.id, kept);
    }
    if (kept.tr.nextSibling !== before || kept.tr.parentNode !== body) body.insertBefore(kept.tr, before);
    before = kept.tr;
  }
  for (const [id, kept] of fleet.rows) {
    if (!seen.has(id)) {
      kept.tr.remove();
      fleet.rows.delete(id);
    }
  }
  $("fleet-empty").hidden = rows.length > 0;
}

function fleetTr(row) {
  const tr = el("tr");
  tr.dataset.id = row.id;
  const name = el("td", "col-run");
  name.append(el("div", "title", row.title || row.provider), el("div", "muted", row.id.slice(0, 12)));
  name.addEventListener("click", guarded(() => selectSession(row.id)));
  const approvals = el("td", "col-approvals");
  for (const asked of row.pending) {
    const box = el("div", "asked");
    box.dataset.request = asked.request_id;
    box.appendChild(el("span", "", `${asked.tool} `));
    appendAnswerButtons(box, row.runId, asked.request_id, refreshFleet);
    approvals.appendChild(box);
  }
  const cells = ["provider", "model", "status", "tool", "tokens", "cost", "branch", "worktree"]
    .map((column) => el("td", `col-${column}`, row[column]));
  tr.append(name, ...cells, approvals, fleetActions(row));
  return tr;
}

function fleetActions(row) {
  const cell = el("td", "col-actions");
  const live = FLEET_LIVE.includes(row.status);
  const buttons = [];
  if (live && row.runId) buttons.push(["Cancel", "cancel", false, () => cancelRun(row)]);
  if (row.branch) {
    const settled = row.worktree !== "open" || live;
    buttons.push(
      ["Diff", "diff", row.worktree === "discarded", () => showDiff(row)],
      ["Merge", "merge", settled, () => askFirst(row, "merge")],
      ["Discard", "discard", settled, () => askFirst(row, "discard")],
    );
  }
  for (const [label, cls, disabled, act] of buttons) {
    const button = el("button", cls, label);
    button.type = "button";
    button.disabled = disabled;
    button.addEventListener("click", guarded(act));
    cell.appendChild(button);
  }
  return cell;
}

// A refusal (409: a dirty main tree, a conflict…) stays in the fleet pane, not only the notice.
async function fleetCall(method, path, body) {
  try {
    return await api(method, path, body);
  } catch (error) {
    fleetMessage(error.message, true);
    error.shown = true;
    throw error;
  }
}

// Shown fixed in the window (the row clicked may be far down a long table) until closed.
function fleetMessage(text, refused) {
  $("fleet-message").textContent = text;
  $("fleet-note").className = refused ? "warning" : "";
  $("fleet-note").hidden = false;
}

async function cancelRun(row) {
  await fleetCall("POST", `/v1/runs/${row.runId}/cancel`);
  await refreshFleet();
}

async function showDiff(row) {
  const shown = await fleetCall("GET", `/v1/sessions/${row.id}/diff`);
  $("fleet-diff-title").textContent = `${shown.branch} against ${String(shown.base).slice(0, 12)} (${shown.state})`;
  $("fleet-diff-text").textContent = shown.diff || "(no changes)";
  if (!$("fleet-diff").open) $("fleet-diff").showModal();  // over the page, in the window
}

function askFirst(row, action) {
  fleet.pending = { row, action };
  const what = action === "merge"
    ? `Merge ${row.branch} into the branch it started from, in the main working tree?`
    : `Discard ${row.branch}? Its worktree and branch are removed; the session stays.`;
  $("fleet-confirm-text").textContent = what;
  $("fleet-squash-label").hidden = action !== "merge";
  $("fleet-squash").checked = false;
  $("fleet-confirm-go").textContent = action === "merge" ? "Merge" : "Discard";
  $("fleet-confirm").showModal();
}

async function confirmed() {
  $("fleet-confirm").close();
  const chosen = fleet.pending;
  fleet.pending = null;
  if (!chosen) return;
  const { row, action } = chosen;
  if (action === "merge") {
    const done = await fleetCall("POST", `/v1/sessions/${row.id}/merge`, { squash: $("fleet-squash").checked });
    fleetMessage(done.commit
      ? `${done.branch} ${done.squashed ? "squashed" : "merged"} into ${done.into}: ${done.commit.slice(0, 12)}`
      : `${done.branch} changed nothing: nothing merged into ${done.into}`, false);
  } else {
    const gone = await fleetCall("POST", `/v1/sessions/${row.id}/discard`);
    fleetMessage(`${gone.branch} discarded: its worktree ${gone.path} and branch removed`, false);
  }
  if ($("fleet-diff").open) $("fleet-diff").close();
  await refreshFleet();
}

$("fleet-confirm-go").addEventListener("click", guarded(confirmed));
$("fleet-confirm-cancel").addEventListener("click", () => {
  fleet.pending = null;
  $("fleet-confirm").close();
});
$("fleet-diff-close").addEventListener("click", () => $("fleet-diff").close());
$("fleet-note-close").addEventListener("click", () => { $("fleet-note").hidden = true; });

refreshFleet();
setInterval(() => { if (!document.hidden) refreshFleet(); }, FLEET_EVERY_MS);
