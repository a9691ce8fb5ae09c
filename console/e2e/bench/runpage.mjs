// Times the console's run page for bench/console: reads a JSON request on
// stdin ({url, origin, cookie: {name, value}, lastLine, samples, chromium}),
// opens url in headless Chromium that many times, each in a fresh signed-in
// context, and prints a JSON array with, per navigation, the time from
// navigation start until an element holding lastLine was added to the DOM
// (a MutationObserver installed before the page's own scripts) and until
// the frame after that was painted.
import { chromium } from "playwright-core";

const req = JSON.parse(await new Promise((ok) => {
  let s = "";
  process.stdin.setEncoding("utf8").on("data", (d) => (s += d)).on("end", () => ok(s));
}));

function observe(lastLine) {
  const seen = (node) => node.textContent && node.textContent.includes(lastLine);
  const mark = () => {
    if (window.__lastLineMs !== undefined) return;
    window.__lastLineMs = performance.now();
    requestAnimationFrame(() => setTimeout(() => (window.__paintedMs = performance.now()), 0));
  };
  new MutationObserver((records, obs) => {
    for (const r of records) {
      const nodes = r.type === "characterData" ? [r.target] : r.addedNodes;
      for (const n of nodes) {
        if (seen(n)) {
          mark();
          obs.disconnect();
          return;
        }
      }
    }
  }).observe(document, { childList: true, subtree: true, characterData: true });
}

const browser = await chromium.launch({
  executablePath: req.chromium,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
const results = [];
try {
  for (let i = 0; i < req.samples; i++) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    await context.addCookies([{ name: req.cookie.name, value: req.cookie.value, url: req.origin, httpOnly: true, sameSite: "Strict" }]);
    const page = await context.newPage();
    await page.addInitScript(observe, req.lastLine);
    const res = await page.goto(req.url, { waitUntil: "commit" });
    if (res.status() !== 200) {
      results.push({ status: res.status(), error: res.status() === 404 ? "" : `status ${res.status()}` });
      await context.close();
      break;
    }
    try {
      await page.waitForFunction(() => window.__paintedMs !== undefined, null, { timeout: 30_000, polling: 50 });
      const t = await page.evaluate(() => ({ lastLineMs: window.__lastLineMs, paintedMs: window.__paintedMs }));
      // In the viewport, as a followed log's last line is.
      const visible = await page
        .getByText(req.lastLine, { exact: false })
        .last()
        .evaluate((el) => {
          const r = el.getBoundingClientRect();
          return r.height > 0 && r.bottom > 0 && r.top < window.innerHeight;
        });
      results.push({ status: 200, ...t, visible });
    } catch (err) {
      results.push({ status: 200, error: `the last line did not show within 30 s (${err.message.split("\n")[0]})` });
      await context.close();
      break;
    }
    await context.close();
  }
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(results));
