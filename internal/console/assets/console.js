// The console's shared browser code: calls to the API as the signed-in
// session (mutations carry the CSRF header the API requires of cookie
// requests), and text-only rendering helpers. User data is only ever set
// with textContent, never parsed as HTML.

export async function api(method, path, body) {
  const init = { method, headers: { "X-Helmr-CSRF": "1" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  if (!resp.ok) {
    const msg = data && data.error ? data.error.message : `${resp.status} ${resp.statusText}`;
    throw new Error(msg);
  }
  return data;
}

// el makes an element with text (never HTML) and attributes.
export function el(tag, text, attrs = {}) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}
