import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { fixtures, runIndexer } from "./helpers.js";

const sandboxManifest = {
  name: "fixture",
  image: { name: "fixture", steps: [{ kind: "from", ref: "helmr/bookworm-node22" }] },
  resources: { cpu: 1, memory: "512Mi" },
};

describe("index runner", () => {
  it("lists every task export of every module without running any", async () => {
    const got = await runIndexer([fixtures, "tasks.js", "noisy.js"]);
    assert.equal(got.code, 0, got.stderr);
    const { tasks } = got.json as { tasks: Array<Record<string, unknown>> };
    assert.deepStrictEqual(
      tasks.map((t) => [t.module, t.export, t.id, t.hasRun]),
      [
        ["tasks.js", "bigint", "bigint", true],
        ["tasks.js", "declaredOnly", "declared-only", false],
        ["tasks.js", "env", "env", true],
        ["tasks.js", "fails", "fails", true],
        ["tasks.js", "fn", "fn", true],
        ["tasks.js", "greet", "greet", true],
        ["tasks.js", "lingering", "lingering", true],
        ["tasks.js", "nothing", "nothing", true],
        ["tasks.js", "throwsString", "throws-string", true],
        ["tasks.js", "uncaught", "uncaught", true],
        ["tasks.js", "unhandled", "unhandled", true],
        ["tasks.js", "waitsForHuman", "waits-for-human", true],
        ["noisy.js", "noisy", "noisy", true],
      ],
    );
    assert.deepStrictEqual(tasks[5], {
      id: "greet",
      module: "tasks.js",
      export: "greet",
      maxDuration: 30,
      secrets: { TOKEN: { env: "TOKEN" } },
      sandbox: sandboxManifest,
      hasRun: true,
    });
    assert.deepStrictEqual(tasks[12]?.sandbox, {
      name: "noisy",
      image: { name: "noisy", steps: [{ kind: "from", ref: "debian" }] },
      workspace: "/work",
      resources: {},
    });
    // What modules print at import goes to stderr; stdout is one JSON line.
    assert.match(got.stderr, /noisy module prints to stdout at import\nand writes to it directly\n/);
    assert.equal(got.stdout.trimEnd().split("\n").length, 1);
  });

  it("reports a module that fails to import", async () => {
    const got = await runIndexer([fixtures, "tasks.js", "broken.js"]);
    assert.equal(got.code, 1);
    const { error } = got.json as { error: Record<string, string> };
    assert.equal(error.module, "broken.js");
    assert.equal(error.message, "broken at import");
    assert.match(error.stack ?? "", /broken\.js/);
  });

  it("reports a task id declared twice", async () => {
    const got = await runIndexer([fixtures, "tasks.js", "duplicate.js"]);
    assert.equal(got.code, 1);
    const { error } = got.json as { error: Record<string, string> };
    assert.equal(error.module, "duplicate.js");
    assert.match(error.message ?? "", /task id "greet" is declared twice: tasks\.js export "greet" and duplicate\.js export "greetAgain"/);
  });

  it("reports a task from an SDK it does not understand", async () => {
    const got = await runIndexer([fixtures, "future-sdk.js"]);
    assert.equal(got.code, 1);
    assert.match((got.json as { error: { message: string } }).error.message, /task brand version 99/);
  });

  it("prints the project config", async () => {
    const got = await runIndexer(["--config", `${fixtures}/helmr.config.js`]);
    assert.equal(got.code, 0, got.stderr);
    assert.deepStrictEqual(got.json, { config: { project: "fixtures", dirs: ["./tasks", "./more"] } });
  });

  it("reports a config without a default export", async () => {
    const got = await runIndexer(["--config", `${fixtures}/no-config.js`]);
    assert.equal(got.code, 1);
    assert.match((got.json as { error: { message: string } }).error.message, /no default export/);
  });

  it("reports usage errors with exit code 2", async () => {
    const got = await runIndexer([fixtures]);
    assert.equal(got.code, 2);
    assert.match((got.json as { error: { message: string } }).error.message, /^usage: /);
  });
});
