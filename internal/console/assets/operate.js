// The operate pages' browser code: a deployment's build log, live; a
// workspace's file upload; secrets (set write-only, delete) and API keys
// (create, shown once; revoke). Mutations go through api() (the CSRF
// header); user data is set with textContent only.
import { api, el } from "/assets/console.js";

const csrf = { "X-Helmr-CSRF": "1" };

// A deployment's build log follows its build run's event stream; the
// browser's EventSource resumes from the last event id it saw.
const log = document.getElementById("build-log");
if (log) {
  const state = document.getElementById("build-log-state");
  const es = new EventSource(`/v1/runs/${encodeURIComponent(log.dataset.run)}/events/stream`);
  es.addEventListener("log", (e) => {
    const ev = JSON.parse(e.data);
    log.append(el("li", ev.data.line, { class: `log-${ev.data.stream}` }));
  });
  es.addEventListener("status", (e) => {
    const ev = JSON.parse(e.data);
    log.append(el("li", `status ${ev.data.to}${ev.data.error ? ": " + ev.data.error.message : ""}`, { class: "log-status" }));
  });
  es.addEventListener("end", () => {
    es.close();
    state.textContent = "The build has ended.";
    const status = document.getElementById("deployment-status");
    if (status && status.textContent === "BUILDING") state.textContent += " Reload for the deployment's state.";
  });
}

// Upload a file into the directory shown.
const upload = document.getElementById("upload-form");
if (upload) {
  const files = document.getElementById("files");
  const status = document.getElementById("upload-status");
  upload.addEventListener("submit", async (e) => {
    e.preventDefault();
    const file = upload.elements.file.files[0];
    if (!file) return;
    const dir = files.dataset.dir;
    const path = dir ? `${dir}/${file.name}` : file.name;
    status.textContent = `Uploading ${file.name}…`;
    try {
      const resp = await fetch(`/v1/workspaces/${encodeURIComponent(files.dataset.workspace)}/files?path=${encodeURIComponent(path)}`,
        { method: "PUT", headers: csrf, credentials: "same-origin", body: file });
      if (!resp.ok) {
        const body = await resp.json().catch(() => null);
        throw new Error(body && body.error ? body.error.message : `${resp.status} ${resp.statusText}`);
      }
      status.textContent = `Uploaded ${path}.`;
      location.reload();
    } catch (err) {
      status.textContent = `Upload failed: ${err.message}`;
    }
  });
}

// Secrets: set a value (the field is cleared; the value is never shown
// again) and delete.
const secretForm = document.getElementById("secret-form");
if (secretForm) {
  const status = document.getElementById("secret-status");
  const scope = `project=${encodeURIComponent(secretForm.dataset.project)}&env=${encodeURIComponent(secretForm.dataset.env)}`;
  secretForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    const name = secretForm.elements.name.value.trim();
    const value = secretForm.elements.value.value;
    secretForm.elements.value.value = "";
    const hosts = secretForm.elements.hosts.value.split(",").map((h) => h.trim()).filter(Boolean);
    const body = { value };
    if (hosts.length) body.egress = { hosts, body: secretForm.elements.body.checked };
    try {
      await api("PUT", `/v1/secrets/${encodeURIComponent(name)}?${scope}`, body);
      status.textContent = `Set ${name}.`;
      location.reload();
    } catch (err) {
      status.textContent = `Could not set ${name}: ${err.message}`;
    }
  });
  for (const b of document.querySelectorAll("[data-delete-secret]")) {
    b.addEventListener("click", async () => {
      const name = b.dataset.deleteSecret;
      if (!confirm(`Delete the secret ${name}? Runs that bind it will fail.`)) return;
      try {
        await api("DELETE", `/v1/secrets/${encodeURIComponent(name)}?${scope}`);
        b.closest("tr").remove();
        status.textContent = `Deleted ${name}.`;
      } catch (err) {
        status.textContent = `Could not delete ${name}: ${err.message}`;
      }
    });
  }
}

// API keys: create (the key is shown once) and revoke.
const keyForm = document.getElementById("apikey-form");
if (keyForm) {
  const errorOut = document.getElementById("apikey-error");
  keyForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    errorOut.textContent = "";
    const f = keyForm.elements;
    const body = {
      project: f.project.value.trim(), env: f.env.value.trim(),
      grants: [...keyForm.querySelectorAll("input[name=grants]:checked")].map((c) => c.value),
    };
    if (f.name.value.trim()) body.name = f.name.value.trim();
    if (f.expiresIn.value.trim()) body.expiresIn = f.expiresIn.value.trim();
    if (body.grants.length === 0) {
      errorOut.textContent = "Pick at least one grant.";
      return;
    }
    try {
      const created = await api("POST", "/v1/apikeys", body);
      document.getElementById("apikey-value").textContent = created.key;
      document.getElementById("apikey-created").hidden = false;
      document.getElementById("apikey-value").focus();
    } catch (err) {
      errorOut.textContent = err.message;
    }
  });
}
for (const b of document.querySelectorAll("[data-revoke-key]")) {
  b.addEventListener("click", async () => {
    const id = b.dataset.revokeKey;
    if (!confirm(`Revoke the key ${id}? Requests with it fail at once.`)) return;
    try {
      await api("POST", `/v1/apikeys/${encodeURIComponent(id)}/revoke`);
      b.replaceWith(el("span", "revoked", { class: "status status-canceled" }));
    } catch (err) {
      b.after(el("span", ` ${err.message}`, { class: "error", role: "alert" }));
    }
  });
}
