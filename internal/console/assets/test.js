// The test page: validates the payload as JSON while it is edited,
// offers recent payloads again, and triggers the task with the secret
// bindings, landing on the new run.

import { api } from "./console.js";

const form = document.getElementById("trigger");
if (form) {
  const box = document.getElementById("payload");
  const err = document.getElementById("payload-error");
  const msg = document.getElementById("action-msg");
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
  box.addEventListener("input", check);
  for (const b of document.querySelectorAll("button.use")) {
    b.addEventListener("click", () => { box.value = b.dataset.payload; check(); box.focus(); });
  }
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
      button.disabled = false;
    }
  });
}
