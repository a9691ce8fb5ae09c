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
const TERMINAL = new Set(["COMPLETED", "FAILED", "TIMED_OUT", "CANCELED", "EXPIRED"]);

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

// Lines go into blocks of CHUNK lines: the browser skips laying out and
// painting the full blocks out of view (content-visibility), so a log of
// tens of thousands of lines stays cheap. The last block, still filling,
// is always laid out: a short log is never an empty box of a full block's
// estimated height, scrolled past its text.
const CHUNK = 500;
let block = null;
let blockLines = 0;

function flush() {
  scheduled = false;
  const batch = queue.splice(0, 20000);
  const frag = document.createDocumentFragment();
  let chunk = [];
  let cls = "";
  const cut = () => {
    if (!chunk.length) return;
    if (!block || blockLines >= CHUNK) {
      if (block) block.classList.add("full");
      block = el("span", null, { class: "chunk" });
      blockLines = 0;
      frag.append(block);
    }
    block.append(el("span", chunk.join(""), { class: cls }));
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
    if (kind !== cls || blockLines + chunk.length >= CHUNK) { cut(); cls = kind; }
    const text = ev.type === "log" ? d.line : `[${d.message || ev.type}]${d.attrs ? " " + JSON.stringify(d.attrs) : ""}`;
    chunk.push(`${text}\n`);
    blockLines++;
    lines++;
  }
  cut();
  logs.append(frag);
  count.textContent = String(lines);
  if (queue.length) {
    schedule();
  } else if (follow.checked) {
    // Once the queue is drained: one layout. Blocks never shown have an
    // estimated height, so scroll again once the last ones are laid out.
    logs.scrollTop = logs.scrollHeight;
    requestAnimationFrame(() => { if (follow.checked) logs.scrollTop = logs.scrollHeight; });
  }
}

function schedule() {
  if (!scheduled) { scheduled = true; requestAnimationFrame(flush); }
}

// What the run has logged so far comes in large JSON pages (one parse per
// 10,000 events instead of one message each), then the stream follows
// from the last of them.
const KINDS = new Set(["status", "log", "system"]);
async function backfill() {
  let after = 0;
  for (;;) {
    let page;
    try {
      page = await api("GET", `/v1/runs/${encodeURIComponent(id)}/events?after=${after}&limit=10000`);
    } catch {
      return after; // the stream delivers the rest
    }
    for (const ev of page.events) {
      if (KINDS.has(ev.type)) queue.push({ type: ev.type, time: ev.time, data: ev.data });
    }
    schedule();
    if (page.events.length < 10000 || page.done) return page.nextCursor || after;
    after = page.nextCursor;
  }
}

backfill().then((after) => stream(`/v1/runs/${encodeURIComponent(id)}/events/stream`, ["status", "log", "system"], {
  after,
  onEvent(type, data) { queue.push({ type, time: data.time, data: data.data }); schedule(); },
  onState(s) { state.textContent = { live: "Live.", reconnecting: "Reconnecting…", retrying: "Disconnected; retrying…" }[s] || s; },
  onEnd() {
    state.textContent = "The run has finished.";
    if (!TERMINAL.has(root.dataset.status)) {
      const again = el("a", "Reload for its output", { href: location.pathname + location.search });
      state.append(" ", again);
    }
  },
}));

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
      // The replay keeps the original's secret bindings and run options
      // (queue, concurrency key, priority, tags); only the payload is edited.
      const run = await api("POST", `/v1/runs/${encodeURIComponent(id)}/replay`, { payload });
      location.assign(`/runs/${encodeURIComponent(run.id)}?${scope}`);
    } catch (err) { say(`Replay failed: ${err.message}`, true); }
  });
}

for (const art of document.querySelectorAll("article.wait")) wireWait(art, id, say);
