// Live lists: an element with data-live="NAME" is refreshed from the
// page's own URL, asking the server for its template NAME alone
// (X-Helmr-Fragment), every data-interval ms while the tab is visible.
// The fragment is HTML the console's templates rendered (user data
// escaped there); it replaces the element's content only when it changed.

const FRAGMENT = "X-Helmr-Fragment";

function follow(node) {
  const name = node.dataset.live;
  const every = Number(node.dataset.interval || 3000);
  let last = null;
  let busy = false;
  async function tick() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const resp = await fetch(location.href, { headers: { [FRAGMENT]: name }, credentials: "same-origin" });
      if (resp.ok) {
        const html = await resp.text();
        // Not while the keyboard is inside: a swap would lose the focus.
        if (node.contains(document.activeElement)) return;
        if (last !== null && html !== last) {
          const t = document.createElement("template");
          t.innerHTML = html; // console-rendered fragment, not user data
          node.replaceChildren(t.content);
        }
        last = html;
        node.removeAttribute("aria-busy");
      } else if (resp.status === 401 || resp.redirected) {
        location.reload();
      }
    } catch {
      node.setAttribute("aria-busy", "true"); // offline; retried next tick
    } finally {
      busy = false;
    }
  }
  tick();
  setInterval(tick, every);
  document.addEventListener("visibilitychange", tick);
}

for (const node of document.querySelectorAll("[data-live]")) follow(node);
