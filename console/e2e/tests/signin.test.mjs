// Sign-in through the browser against a real helmr dev.
import assert from "node:assert/strict";
import { stat } from "node:fs/promises";
import { after, before, test } from "node:test";

import { assertNoPageErrors, checkA11y, launch, newPage, screenshot, sessionCookie, signIn } from "../lib/browser.mjs";
import { startDev } from "../lib/dev.mjs";

/** @type {import("../lib/dev.mjs").Dev} */
let dev;
/** @type {import("playwright-core").Browser} */
let browser;

before(async () => {
  dev = await startDev();
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await dev?.stop();
});

test("the owner signs in and the session reads the API", async (t) => {
  const page = await newPage(browser, t);
  const res = await signIn(page, dev.url, dev.token);
  assert.equal(res?.status(), 200, `the page after signing in answered ${res?.status()}`);

  const cookie = await sessionCookie(page);
  assert.ok(cookie, "no helmr_session cookie after signing in");
  assert.equal(cookie.httpOnly, true, "the session cookie is readable by scripts");
  assert.equal(cookie.sameSite, "Strict", "the session cookie is not SameSite=Strict");
  assert.equal(await page.evaluate(() => document.cookie.includes("helmr_session")), false, "document.cookie shows the session");

  // The signed-in page offers to sign out, and the session reads the API.
  await page.getByRole("button", { name: /sign out/i }).waitFor();
  const api = await page.request.get(dev.url + "/v1/runs?project=none");
  assert.equal(api.status(), 200, `GET /v1/runs in the session = ${api.status()}: ${await api.text()}`);

  const shot = await screenshot(page, "signed-in");
  assert.ok((await stat(shot)).size > 1000, `screenshot ${shot} is empty`);
  await checkA11y(page);
  assertNoPageErrors(page);
});

test("a wrong credential is refused", async (t) => {
  const page = await newPage(browser, t);
  await signIn(page, dev.url, "hko_not-the-owner-credential");

  assert.equal(await sessionCookie(page), undefined, "a wrong credential got a session cookie");
  await page.locator('input[name="credential"]').waitFor(); // still the sign-in form
  await page.getByRole("alert").first().waitFor(); // says why
  const api = await page.request.get(dev.url + "/v1/runs?project=none");
  assert.equal(api.status(), 401, `GET /v1/runs after a refused sign-in = ${api.status()}`);

  await screenshot(page, "refused");
  await checkA11y(page);
  assertNoPageErrors(page);
});

test("signing out ends the session", async (t) => {
  const page = await newPage(browser, t);
  await signIn(page, dev.url, dev.token);
  const before = await sessionCookie(page);
  assert.ok(before, "no session cookie after signing in");
  await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: /sign out/i }).click()]);
  assert.equal(await sessionCookie(page), undefined, "the session cookie outlived signing out");

  // The old cookie, sent again, no longer stands for the owner.
  const res = await fetch(dev.url + "/v1/runs?project=none", { headers: { Cookie: `helmr_session=${before.value}` } });
  assert.equal(res.status, 401, `GET /v1/runs with a signed-out session's cookie = ${res.status}`);
  await screenshot(page, "signed-out");
});
