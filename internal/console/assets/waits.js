// Answering waits: a human wait's approve form (built from its schema,
// validated before it is sent) and reject form with a reason, for the
// run page and the approvals inbox; a token's complete (JSON) and cancel
// for the tokens page. After an answer the page reloads.

import { api } from "./console.js";
import { schemaForm } from "./schemaform.js";

// wireWait wires the approve and reject forms of a human wait's article
// for run runID; say reports errors.
export function wireWait(art, runID, say) {
  const approve = art.querySelector("form.approve");
  const reject = art.querySelector("form.reject");
  if (!approve || !reject) return;
  let schema = null;
  try { schema = approve.dataset.schema ? JSON.parse(approve.dataset.schema) : null; } catch { schema = null; }
  const form = schemaForm(approve.querySelector(".fields"), schema);
  const run = encodeURIComponent(runID);
  approve.addEventListener("submit", async (e) => {
    e.preventDefault();
    const r = form.read();
    if (!r.ok) { say("Fix the highlighted fields first.", true); return; }
    try {
      await api("POST", `/v1/runs/${run}/approve`, r.value === undefined ? {} : { data: r.value });
      location.reload();
    } catch (err) { say(`Approve failed: ${err.message}`, true); }
  });
  reject.addEventListener("submit", async (e) => {
    e.preventDefault();
    const reason = reject.elements.reason.value.trim();
    try {
      await api("POST", `/v1/runs/${run}/reject`, reason ? { reason } : {});
      location.reload();
    } catch (err) { say(`Reject failed: ${err.message}`, true); }
  });
}

// wireToken wires a token row's complete (JSON data) and cancel forms.
export function wireToken(row, say) {
  const id = encodeURIComponent(row.dataset.token);
  const complete = row.querySelector("form.complete");
  const cancel = row.querySelector("form.cancel");
  if (complete) {
    complete.addEventListener("submit", async (e) => {
      e.preventDefault();
      const box = complete.elements.data;
      let data = null;
      try { data = box.value.trim() === "" ? null : JSON.parse(box.value); } catch (err) {
        box.setAttribute("aria-invalid", "true");
        say(`The data is not valid JSON: ${err.message}`, true);
        box.focus();
        return;
      }
      box.removeAttribute("aria-invalid");
      try {
        await api("POST", `/v1/tokens/${id}/complete`, { data });
        location.reload();
      } catch (err) { say(`Complete failed: ${err.message}`, true); }
    });
  }
  if (cancel) {
    cancel.addEventListener("submit", async (e) => {
      e.preventDefault();
      const reason = cancel.elements.reason.value.trim();
      try {
        await api("POST", `/v1/tokens/${id}/cancel`, reason ? { reason } : {});
        location.reload();
      } catch (err) { say(`Cancel failed: ${err.message}`, true); }
    });
  }
}

// The approvals inbox and tokens page wire their rows themselves.
const page = document.querySelector("[data-waits]");
if (page) {
  const msg = document.getElementById("action-msg");
  const say = (text, bad) => { msg.textContent = text; msg.classList.toggle("error", !!bad); };
  for (const art of page.querySelectorAll("article.wait[data-run]")) wireWait(art, art.dataset.run, say);
  for (const row of page.querySelectorAll("[data-token]")) wireToken(row, say);
}
