// The test page of a task with a declared input (issue 18): the payload
// form the server renders from the schema edits the JSON editor and
// follows it, a payload the control plane refuses marks the field its
// message names and creates no run, and a fitting one runs.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { checkA11y, launch, newPage, screenshot, signIn } from "../lib/browser.mjs";
import { startDev } from "../lib/dev.mjs";

const project = "console-inputs";
const scope = `project=${project}&env=dev`;

/** @type {import("../lib/dev.mjs").Dev} */
let dev;
/** @type {import("playwright-core").Browser} */
let browser;

before(async () => {
  dev = await startDev();
  browser = await launch();
  await dev.deploy("console/e2e/fixtures/console-inputs");
});
after(async () => {
  await browser?.close();
  await dev?.stop();
});

test("the test page's payload form follows the task's input; a refused payload marks its field", async (t) => {
  const page = await newPage(browser, t);
  await signIn(page, dev.url, dev.token);
  await page.goto(`${dev.url}/test?${scope}&task=review`);
  const box = page.locator("#payload");
  /** The payload form's control of a property. */
  const field = (name) => page.locator(`#payload-form [data-field="${name}"]`);
  const form = page.locator("#payload-form");
  await form.waitFor();
  // Each field is labelled by the property's title, or its name.
  assert.equal(await page.getByRole("textbox", { name: "Repository (required)" }).getAttribute("data-field"), "repo");
  assert.equal(await page.getByRole("spinbutton", { name: "pr (required)" }).getAttribute("data-field"), "pr");
  // The editor starts from the schema's defaults, and the form shows them.
  assert.deepEqual(JSON.parse(await box.inputValue()), { mode: "fast" });
  assert.equal(await field("mode").inputValue(), '"fast"');
  await page.locator("details.input-schema summary").click();
  await screenshot(page, "input-form");
  await checkA11y(page);

  // Fields write the JSON.
  await field("repo").fill("helmr/helmr");
  await field("draft").selectOption("true");
  await field("mode").selectOption({ label: "thorough" });
  assert.deepEqual(JSON.parse(await box.inputValue()), { mode: "thorough", repo: "helmr/helmr", draft: true });
  // The JSON writes the fields; what the form has no field for stays in it.
  await box.fill(JSON.stringify({ repo: "a/b", pr: 7, labels: ["x"] }));
  assert.equal(await field("repo").inputValue(), "a/b");
  assert.equal(await field("pr").inputValue(), "7");
  assert.equal(await field("mode").inputValue(), "");
  await field("pr").fill("");
  assert.deepEqual(JSON.parse(await box.inputValue()), { repo: "a/b", labels: ["x"] });

  // Without pr the control plane refuses it, naming payload.pr; no run.
  await page.getByRole("button", { name: "Trigger" }).click();
  await page.locator("#action-msg").filter({ hasText: "payload.pr: missing property" }).waitFor();
  assert.equal(await field("pr").getAttribute("aria-invalid"), "true");
  await page.locator("#in-0-err").filter({ hasText: "missing property" }).waitFor();
  assert.match(page.url(), /\/test\?/);
  const none = await dev.api("GET", `/v1/runs?${scope}`);
  assert.equal(none.runs.length, 0, "a refused payload stored a run");
  await screenshot(page, "input-refused");

  // With it, the run starts and completes with the payload.
  await field("pr").fill("12");
  await Promise.all([page.waitForURL(/\/runs\/run_/), page.getByRole("button", { name: "Trigger" }).click()]);
  await page.locator("#run-status").filter({ hasText: "COMPLETED" }).waitFor({ timeout: 60_000 });
  await page.locator("#logs").filter({ hasText: "reviewing a/b#12 (fast)" }).waitFor();
  const id = /\/runs\/([^?]+)/.exec(page.url())[1];
  const run = await dev.api("GET", `/v1/runs/${id}`);
  assert.deepEqual(run.payload, { repo: "a/b", pr: 12, labels: ["x"] });
  // The one refused trigger is the page's only failed request; nothing else went wrong.
  assert.deepEqual(
    page.errors.map((e) => e.replace(dev.url, "")),
    [`fetch /v1/tasks/review/runs?${scope} answered 400`],
    `errors on ${page.url()}`,
  );
});
