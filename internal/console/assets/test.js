// The test page: validates the payload as JSON while it is edited, keeps
// the payload form (fields the server rendered from the task's input
// schema) and the JSON editor in step, offers recent payloads again, and
// triggers the task with the secret bindings, landing on the new run. A
// payload the server refuses names its fields' paths (payload.repo: ...):
// the matching fields are marked.

import { api } from "./console.js";

const form = document.getElementById("trigger");
if (form) {
  const box = document.getElementById("payload");
  const err = document.getElementById("payload-error");
  const msg = document.getElementById("action-msg");
  const fields = [...form.querySelectorAll("[data-field]")];
  const check = () => {
    const s = box.value.trim();
    try {
      const v = s === "" ? null : JSON.parse(s);
      err.textContent = "";
      box.removeAttribute("aria-invalid");
      return { ok: true, value: v };
    } catch (e) {
      err.textContent = `Not valid JSON: ${e.message}`;
      box.setAttribute("aria-invalid", "true");
      return { ok: false };
    }
  };
  const isObject = (v) => typeof v === "object" && v !== null && !Array.isArray(v);
  const fieldError = (input, text) => {
    const p = document.getElementById(`${input.id}-err`);
    if (p) p.textContent = text;
    if (text) input.setAttribute("aria-invalid", "true"); else input.removeAttribute("aria-invalid");
  };

  // readField returns {set, value} for a field's control, or {error}.
  const readField = (input) => {
    const s = input.value;
    if (s === "" || (input.dataset.kind !== "string" && s.trim() === "")) return { set: false };
    switch (input.dataset.kind) {
      case "enum": return { set: true, value: JSON.parse(s) };
      case "boolean": return { set: true, value: s === "true" };
      case "number":
      case "integer": {
        const n = Number(s);
        if (!Number.isFinite(n)) return { error: "must be a number" };
        if (input.dataset.kind === "integer" && !Number.isInteger(n)) return { error: "must be a whole number" };
        return { set: true, value: n };
      }
      default: return { set: true, value: s };
    }
  };
  // writeField shows a payload value in a field's control.
  const writeField = (input, v) => {
    fieldError(input, "");
    if (v === undefined) { input.value = ""; return; }
    switch (input.dataset.kind) {
      case "enum": {
        const want = JSON.stringify(v);
        const match = [...input.options].find((o) => o.value !== "" && JSON.stringify(JSON.parse(o.value)) === want);
        input.value = match ? match.value : "";
        if (!match) fieldError(input, `The JSON holds ${want}, not one of the choices`);
        return;
      }
      case "boolean":
        input.value = v === true ? "true" : v === false ? "false" : "";
        if (typeof v !== "boolean") fieldError(input, `The JSON holds ${JSON.stringify(v)}, not true or false`);
        return;
      case "number":
      case "integer":
        input.value = typeof v === "number" ? String(v) : "";
        if (typeof v !== "number") fieldError(input, `The JSON holds ${JSON.stringify(v)}, not a number`);
        return;
      default:
        input.value = typeof v === "string" ? v : "";
        if (typeof v !== "string") fieldError(input, `The JSON holds ${JSON.stringify(v)}, not text`);
    }
  };
  // fromEditor fills the fields from the editor's JSON (an object).
  const fromEditor = () => {
    const p = check();
    if (!p.ok || !isObject(p.value)) return;
    for (const input of fields) writeField(input, p.value[input.dataset.field]);
  };
  // fromField writes one field into the editor's JSON object.
  const fromField = (input) => {
    const p = check();
    if (!p.ok || !(p.value === null || isObject(p.value))) {
      fieldError(input, "Fix the JSON below first: the fields edit its object");
      return;
    }
    const r = readField(input);
    if (r.error) { fieldError(input, r.error); return; }
    fieldError(input, "");
    const obj = p.value ?? {};
    if (r.set) obj[input.dataset.field] = r.value; else delete obj[input.dataset.field];
    box.value = JSON.stringify(obj, null, 2);
  };

  box.addEventListener("input", fromEditor);
  for (const input of fields) input.addEventListener(input.tagName === "SELECT" ? "change" : "input", () => fromField(input));
  fromEditor();
  for (const b of document.querySelectorAll("button.use")) {
    b.addEventListener("click", () => { box.value = b.dataset.payload; fromEditor(); box.focus(); });
  }
  // markRefused marks the fields a refusal's message names.
  const markRefused = (message) => {
    let first = null;
    for (const m of message.matchAll(/payload\.([A-Za-z_$-][\w$-]*)[^;]*?: ([^;]+?)(?=;|\(|$)/g)) {
      const input = fields.find((f) => f.dataset.field === m[1]);
      if (!input) continue;
      fieldError(input, m[2].trim());
      first = first || input;
    }
    if (first) first.focus();
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const p = check();
    if (!p.ok) { box.focus(); return; }
    const secrets = {};
    for (const input of form.querySelectorAll("[data-secret]")) {
      const name = input.value.trim();
      if (name) secrets[input.dataset.secret] = `vault:${name}`;
    }
    const scope = `project=${encodeURIComponent(form.dataset.project)}&env=${encodeURIComponent(form.dataset.env)}`;
    const body = { payload: p.value };
    if (Object.keys(secrets).length) body.secrets = secrets;
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const run = await api("POST", `/v1/tasks/${encodeURIComponent(form.dataset.task)}/runs?${scope}`, body);
      location.assign(`/runs/${encodeURIComponent(run.id)}?${scope}`);
    } catch (e2) {
      msg.textContent = `Trigger failed: ${e2.message}`;
      msg.classList.add("error");
      markRefused(String(e2.message));
      button.disabled = false;
    }
  });
}
