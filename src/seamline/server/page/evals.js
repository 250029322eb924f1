// The evaluations kept beside the server's store (`seamline eval`): one row each, its id a
// link to the evaluation's own report page. Read-only; refreshed now and then.
"use strict";

const EVALS_EVERY_MS = 10000;

async function refreshEvals() {
  let listed;
  try {
    const reply = await fetch("/v1/evals");
    if (!reply.ok) return;
    listed = (await reply.json()).evaluations;
  } catch (error) {
    return; // the server gone for a moment: the next poll tries again
  }
  const body = document.querySelector("#evals tbody");
  body.replaceChildren(...listed.map(evalRow));
  document.getElementById("evals-empty").hidden = listed.length > 0;
}

function evalRow(item) {
  const tr = document.createElement("tr");
  tr.dataset.eval = item.id;
  const link = document.createElement("a");
  link.href = `/v1/evals/${encodeURIComponent(item.id)}/page`;
  link.target = "_blank";
  link.rel = "noopener";
  link.textContent = item.id.slice(0, 12);
  const cells = [link, item.status, `${item.trials}/${item.planned}`, item.variants.join(", "), item.dataset];
  for (const value of cells) {
    const td = document.createElement("td");
    if (value instanceof Node) td.append(value);
    else td.textContent = String(value);
    tr.append(td);
  }
  return tr;
}

refreshEvals();
setInterval(() => { if (!document.hidden) refreshEvals(); }, EVALS_EVERY_MS);
