// The console's runs list against a real helmr dev, with runs the CLI
// started from the fixture project.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { assertNoPageErrors, checkA11y, launch, newPage, screenshot, signIn } from "../lib/browser.mjs";
import { startDev } from "../lib/dev.mjs";

const project = "console-e2e";
const scope = `project=${project}&env=dev`;

/** @type {import("../lib/dev.mjs").Dev} */
let dev;
/** @type {import("playwright-core").Browser} */
let browser;
let echoRun, waitingRun;

before(async () => {
  dev = await startDev();
  browser = await launch();
  await dev.deploy("console/e2e/fixtures/console-e2e");
  echoRun = await dev.trigger(project, "echo", { lines: ["hello from the runs list"] });
  waitingRun = await dev.trigger(project, "approval", { question: "Runs list: ship it?" });
  await dev.waitRun(echoRun.id, (r) => r.status === "COMPLETED");
  await dev.waitRun(waitingRun.id, (r) => r.status === "WAITING");
});
after(async () => {
  await browser?.close();
  await dev?.stop();
});

/** A signed-in page for t. */
async function signedIn(t, opts) {
  const page = await newPage(browser, t, opts);
  await signIn(page, dev.url, dev.token);
  return page;
}

/** The runs list's row of run id. */
function row(page, id) {
  return page.locator("table.runs tbody tr").filter({ has: page.getByRole("link", { name: id }) });
}

test("the runs list shows the runs the CLI started, with their status", async (t) => {
  const page = await signedIn(t);
  const res = await page.goto(`${dev.url}/runs?${scope}`);
  assert.equal(res?.status(), 200);
  assert.match(res.headers()["content-security-policy"] ?? "", /script-src 'self'/, "the runs page has no strict CSP");

  await row(page, echoRun.id).waitFor();
  assert.match(await row(page, echoRun.id).innerText(), /echo[\s\S]*COMPLETED/);
  assert.match(await row(page, waitingRun.id).innerText(), /approval[\s\S]*WAITING/);
  // Newest first: the approval run was started after the echo run.
  const ids = await page.locator("table.runs tbody tr td:first-child").allInnerTexts();
  assert.ok(ids.indexOf(waitingRun.id) < ids.indexOf(echoRun.id), `runs in order ${ids}, want newest first`);

  await screenshot(page, "runs");
  await checkA11y(page);
  assertNoPageErrors(page);
});

test("the runs list filters by status", async (t) => {
  const page = await signedIn(t);
  await page.goto(`${dev.url}/runs?${scope}`);
  await page.locator('select[name="status"]').selectOption("WAITING");
  await Promise.all([page.waitForURL(/status=WAITING/), page.getByRole("button", { name: "Filter" }).click()]);

  await row(page, waitingRun.id).waitFor();
  assert.equal(await row(page, echoRun.id).count(), 0, "a COMPLETED run is listed under status WAITING");
  assert.equal(await page.locator('select[name="status"]').inputValue(), "WAITING", "the filter does not show what it selects");

  await screenshot(page, "runs-waiting");
  await checkA11y(page);
  assertNoPageErrors(page);
});

test("the runs list without a project shows the first one's, and the selector switches", async (t) => {
  const page = await signedIn(t);
  await page.goto(`${dev.url}/runs`);
  await row(page, echoRun.id).waitFor();
  const selector = page.locator('header select[name="scope"]');
  assert.equal(await selector.inputValue(), `${project}/dev`, "the selector does not show the environment listed");
  await selector.selectOption(`${project}/dev`);
  await Promise.all([page.waitForURL(/project=console-e2e&env=dev|env=dev&project=console-e2e/), page.locator("header form.scope").getByRole("button", { name: "Go" }).click()]);
  await row(page, echoRun.id).waitFor();

  await screenshot(page, "runs-scoped");
  await checkA11y(page);
  assertNoPageErrors(page);
});

// The payloads are reflected in the query, in filter fields and in the
// API's error message that the error page shows. The page runs with its
// CSP bypassed, so that only escaping keeps them inert.
test("XSS payloads in the runs list's query stay text", async (t) => {
  const page = await signedIn(t, { bypassCSP: true });
  const script = "<script>window.__xss=1</script>";
  const img = `<img src=x onerror="window.__xss=1">`;

  await page.goto(`${dev.url}/runs?${scope}&task=${encodeURIComponent(img)}`);
  assert.equal(await page.locator('input[name="task"]').inputValue(), img, "the task filter does not show the text it was given");
  assert.equal(await page.evaluate(() => window.__xss), undefined, "a payload in the task filter ran");

  const res = await page.goto(`${dev.url}/runs?project=${encodeURIComponent(script + img)}&env=dev`);
  assert.ok(res && res.status() >= 400, `an invalid project answered ${res?.status()}, want an error page`);
  await page.getByRole("alert").filter({ hasText: script }).waitFor();
  const shown = await page.getByRole("alert").innerText();
  assert.ok(shown.includes("<img src=x onerror="), `the error ${JSON.stringify(shown)} does not show the payload as text`);
  assert.equal(await page.evaluate(() => window.__xss), undefined, "a payload in the error page ran");
  assert.equal(await page.locator("main img, main script").count(), 0, "the payload became elements");

  await screenshot(page, "xss-error");
  await checkA11y(page);
});
