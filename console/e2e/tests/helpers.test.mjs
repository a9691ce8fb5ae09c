// The harness's own checks, on pages it makes itself (no helmr dev): the
// accessibility check fails where it must, and screenshots are PNGs.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, test } from "node:test";

import { assertNoPageErrors, checkA11y, launch, newPage, screenshot } from "../lib/browser.mjs";

/** @type {import("playwright-core").Browser} */
let browser;
before(async () => {
  browser = await launch();
});
after(() => browser?.close());

const clean = `<!doctype html><html lang="en"><head><title>Clean</title></head>
<body><main><h1>Clean</h1><label>Name <input name="n"></label></main></body></html>`;

test("checkA11y passes a clean page and fails an unlabelled field and an image without alt", async (t) => {
  const page = await newPage(browser, t);
  await page.setContent(clean);
  await checkA11y(page);

  await page.setContent(`<!doctype html><html lang="en"><head><title>Bad</title></head>
<body><main><h1>Bad</h1><input name="n"><img src="data:image/gif;base64,R0lGODlhAQABAAAAACw="></main></body></html>`);
  await assert.rejects(checkA11y(page), (err) => {
    assert.match(err.message, /critical (label|image-alt)/);
    assert.match(err.message, /image-alt/);
    return true;
  });
});

test("checkA11y runs under a strict CSP that refuses inline scripts", async (t) => {
  const page = await newPage(browser, t);
  await page.route("http://csp.test/", (route) =>
    route.fulfill({ contentType: "text/html", headers: { "Content-Security-Policy": "default-src 'self'; script-src 'self'" }, body: clean }),
  );
  await page.goto("http://csp.test/");
  await checkA11y(page);
});

test("screenshot saves a PNG under out/<test>/", async (t) => {
  const page = await newPage(browser, t);
  await page.setContent(clean);
  const file = await screenshot(page, "clean page");
  assert.match(file, /out\/screenshot-saves-a-PNG-under-out-test\/clean-page\.png$/);
  const head = (await readFile(file)).subarray(0, 8);
  assert.deepEqual([...head], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], `${file} is not a PNG`);
  assertNoPageErrors(page);
});

test("assertNoPageErrors catches an uncaught error", async (t) => {
  const page = await newPage(browser, t);
  const thrown = page.waitForEvent("pageerror");
  await page.setContent(`<script>setTimeout(() => { throw new Error("boom") })</script>`);
  await thrown;
  assert.throws(() => assertNoPageErrors(page), /boom/);
});
