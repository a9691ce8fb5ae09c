// The run page: its live timeline and logs, session streams, and actions
// (cancel, replay, approve with the wait's schema form, reject, send
// input). Logs are appended as text nodes, in batches once per animation
// frame, so tens of thousands of lines stay smooth.

import { api, el } from "./console.js";
import { wireWait } from "./waits.js";
import { stream } from "./stream.js";

const root = document.getElementById("run");
const id = root.dataset.run;
const scope = `project=${encodeURIComponent(root.dataset.project)}&env=${encodeURIComponent(root.dataset.env)}`;
const msg = document.getElementById("action-msg");
const TERMINAL = new Set(["COMPLETED", "FAILED", "TIMED_OUT", "CANCELED"]);

function say(text, bad) {
  msg.textContent = text;
  msg.classList.toggle("error", !!bad);
}

// --- timeline and logs ---------------------------------------------------

const timeline = document.getElementById("timeline");
const logs = document.getElementById("logs");
const state = document.getElementById("timeline-state");
const follow = document.getElementById("follow");
const count = document.getElementById("log-count");
const statusBadge = document.getElementById("run-status");
const queue = [];
let lines = 0;
let scheduled = false;

function time(t) {
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? "" : d.toISOString().slice(11, 23);
}

function flush() {
  scheduled = false;
  const batch = queue.splice(0, 5000);
  const frag = document.createDocumentFragment();
  let chunk = [];
  let cls = "";
  const cut = () => {
    if (chunk.length) frag.append(el("span", chunk.join(""), { class: cls }));
    chunk = [];
  };
  for (const ev of batch) {
    const d = ev.data || {};
    if (ev.type === "status") {
      const li = el("li", null);
      li.append(el("time", time(ev.time), { datetime: ev.time }), " ", el("span", d.to, { class: `status status-${String(d.to).toLowerCase()}` }));
      if (d.error) li.append(" ", el("span", `${d.error.class}: ${d.error.message}`));
      timeline.append(li);
      statusBadge.textContent = d.to;
      statusBadge.className = `status status-${String(d.to).toLowerCase()}`;
      continue;
    }
    const kind = ev.type === "log" ? `log-${d.stream || "stdout"}` : "log-system";
    if (kind !== cls) { cut(); cls = kind; }
    const text = ev.type === "log" ? d.line : `[${d.message || ev.type}]${d.attrs ? " " + JSON.stringify(d.attrs) : ""}`;
    chunk.push(`${text}\n`);
    lines++;
  }
  cut();
  logs.append(frag);
  count.textContent = String(lines);
  if (follow.checked) logs.scrollTop = logs.scrollHeight;
  if (queue.length) schedule();
}

function schedule() {
  if (!scheduled) { scheduled = true; requestAnimationFrame(flush); }
}

stream(`/v1/runs/${encodeURIComponent(id)}/events/stream`, ["status", "log", "system"], {
  onEvent(type, data) { queue.push({ type, time: data.time, data: data.data }); schedule(); },
  onState(s) { state.textContent = { live: "Live.", reconnecting: "Reconnecting…", retrying: "Disconnected; retrying…" }[s] || s; },
  onEnd() {
    state.textContent = "The run has finished.";
    if (!TERMINAL.has(root.dataset.status)) {
      const again = el("a", "Reload for its output", { href: location.pathname + location.search });
      state.append(" ", again);
    }
  },
});

// --- session streams -----------------------------------------------------

const output = document.getElementById("session-output");
if (output) {
  stream(`/v1/runs/${encodeURIComponent(id)}/session/output/stream`, ["record"], {
    onEvent(_t, rec) {
      const li = el("li", null);
      li.append(el("time", time(rec.time), { datetime: rec.time }), " ", el("code", JSON.stringify(rec.data)));
      output.append(li);
    },
  });
}

const input = document.getElementById("session-input");
if (input) {
  input.addEventListener("submit", async (e) => {
    e.preventDefault();
    const box = document.getElementById("session-data");
    const s = box.value.trim();
    if (!s) return;
    let data;
    try { data = JSON.parse(s); } catch { data = s; }
    try {
      await api("POST", `/v1/runs/${encodeURIComponent(id)}/session/input`, { data });
      box.value = "";
      say("Input sent.");
    } catch (err) { say(`Send failed: ${err.message}`, true); }
  });
}

// --- actions -------------------------------------------------------------

const cancel = document.getElementById("cancel");
if (cancel) {
  cancel.addEventListener("click", async () => {
    if (!confirm("Cancel this run? Its sandbox is destroyed.")) return;
    cancel.disabled = true;
    try {
      await api("POST", `/v1/runs/${encodeURIComponent(id)}/cancel`);
      location.reload();
    } catch (err) { say(`Cancel failed: ${err.message}`, true); cancel.disabled = false; }
  });
}

const replay = document.getElementById("replay");
if (replay) {
  replay.addEventListener("submit", async (e) => {
    e.preventDefault();
    const box = document.getElementById("replay-payload");
    let payload;
    try { payload = box.value.trim() === "" ? null : JSON.parse(box.value); } catch (err) {
      box.setAttribute("aria-invalid", "true");
      say(`The payload is not valid JSON: ${err.message}`, true);
      box.focus();
      return;
    }
    box.removeAttribute("aria-invalid");
    try {
      const run = await api("POST", `/v1/tasks/${encodeURIComponent(root.dataset.task)}/runs?${scope}`, { payload, replayOf: id });
      location.assign(`/runs/${encodeURIComponent(run.id)}?${scope}`);
    } catch (err) { say(`Replay failed: ${err.message}`, true); }
  });
}

for (const art of document.querySelectorAll("article.wait")) wireWait(art, id, say);
