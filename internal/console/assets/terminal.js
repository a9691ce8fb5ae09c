// The workspace terminal: xterm.js (vendored) connected to the API's
// terminal session. Keys go to POST .../input (one request at a time, what
// was typed meanwhile batched), the size to POST .../resize, and output
// comes from the SSE stream .../output, base64 bytes written as they come
// (a reconnect resumes after the last event). Nothing the shell prints is
// parsed as HTML: xterm.js draws it as terminal cells.
//
// CSP: xterm.js's DOM renderer makes <style> elements, which the
// console's style-src 'self' refuses; they are kept out of the document
// and their text applied through a constructed stylesheet (CSSOM, which
// the policy allows) instead.
import { Terminal } from "./vendor/xterm/xterm.mjs";
import { FitAddon } from "./vendor/xterm/addon-fit.mjs";
import { stream } from "./stream.js";

const section = document.getElementById("terminal");
const openBtn = document.getElementById("term-open");
const closeBtn = document.getElementById("term-close");
const statusEl = document.getElementById("term-status");
const box = document.getElementById("term-box");

function setStatus(text) { statusEl.textContent = text; }

async function call(method, path, body, type) {
  const init = { method, credentials: "same-origin", headers: { "X-Helmr-CSRF": "1" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = type || "application/json";
    init.body = type ? body : JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (!resp.ok) {
    let msg = `${resp.status} ${resp.statusText}`;
    try { const e = await resp.json(); if (e && e.error) msg = e.error.message; } catch { /* not JSON */ }
    throw new Error(msg);
  }
  return resp.status === 204 ? null : resp.json();
}

// captureStyles opens term in box with every <style> element xterm.js
// makes kept out of the document (where the CSP would refuse it and
// report a violation) and its text applied through one constructed
// stylesheet (CSSOM, which the policy allows), kept in step as xterm.js
// rewrites it. It returns a function that syncs the sheet again.
function captureStyles(term, box) {
  const sheet = new CSSStyleSheet();
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
  const styles = [];
  const sync = () => sheet.replaceSync(styles.map((s) => s.textContent).join("\n"));
  const obs = new MutationObserver(sync);
  const keep = (node) => {
    if (!(node instanceof HTMLStyleElement)) return false;
    styles.push(node);
    obs.observe(node, { childList: true, characterData: true, subtree: true });
    return true;
  };
  const append = Node.prototype.appendChild;
  const insert = Node.prototype.insertBefore;
  Node.prototype.appendChild = function (node) { return keep(node) ? node : append.call(this, node); };
  Node.prototype.insertBefore = function (node, ref) { return keep(node) ? node : insert.call(this, node, ref); };
  try {
    term.open(box);
  } finally {
    Node.prototype.appendChild = append;
    Node.prototype.insertBefore = insert;
  }
  sync();
  return sync;
}

function decode(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

let session = null;

async function open() {
  openBtn.disabled = true;
  box.hidden = false;
  box.replaceChildren();
  const term = new Terminal({ cursorBlink: true, convertEol: false, scrollback: 5000, fontFamily: "monospace" });
  const fit = new FitAddon();
  term.loadAddon(fit);
  const sync = captureStyles(term, box);
  fit.fit();
  sync();
  setStatus("Starting the shell…");
  const base = `/v1/workspaces/${encodeURIComponent(section.dataset.workspace)}/terminals`;
  let t;
  try {
    t = await call("POST", base, { cols: term.cols, rows: term.rows });
  } catch (e) {
    setStatus(`Could not open a terminal: ${e.message}`);
    term.dispose();
    openBtn.disabled = false;
    return;
  }
  const path = `${base}/${encodeURIComponent(t.id)}`;
  let pending = "";
  let sending = false;
  let ended = false;
  const flush = async () => {
    if (sending || pending === "" || ended) return;
    sending = true;
    const keys = pending;
    pending = "";
    try {
      await call("POST", `${path}/input`, keys, "application/octet-stream");
    } catch (e) {
      setStatus(`Input failed: ${e.message}`);
    }
    sending = false;
    flush();
  };
  term.onData((d) => { pending += d; flush(); });
  term.onBinary((d) => { pending += d; flush(); });
  let resizeTimer = null;
  term.onResize(({ cols, rows }) => {
    sync();
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      if (!ended) call("POST", `${path}/resize`, { cols, rows }).catch((e) => setStatus(`Resize failed: ${e.message}`));
    }, 150);
  });
  const ro = new ResizeObserver(() => { if (!ended) fit.fit(); });
  ro.observe(box);
  const out = stream(path + "/output", ["output"], {
    onEvent: (_type, data) => { if (data && data.data) term.write(decode(data.data)); },
    onState: (s) => { if (!ended) setStatus(s === "live" ? "Connected" : "Reconnecting…"); },
    onEnd: async () => {
      ended = true;
      ro.disconnect();
      let msg = "The terminal closed.";
      try {
        const fin = await call("GET", path);
        if (fin.error) msg = `The terminal closed: ${fin.error}`;
        else if (fin.exitCode !== undefined) msg = `The shell exited with ${fin.exitCode}.`;
      } catch { /* gone already */ }
      setStatus(msg);
      term.options.disableStdin = true;
      closeBtn.hidden = true;
      openBtn.disabled = false;
      openBtn.textContent = "Open a new terminal";
    },
  });
  session = { path, term, out };
  closeBtn.hidden = false;
  term.focus();
}

async function close() {
  if (!session) return;
  closeBtn.disabled = true;
  try {
    await call("DELETE", session.path);
  } catch (e) {
    setStatus(`Close failed: ${e.message}`);
  }
  closeBtn.disabled = false;
}

if (section && openBtn) {
  openBtn.addEventListener("click", open);
  closeBtn.addEventListener("click", close);
}
