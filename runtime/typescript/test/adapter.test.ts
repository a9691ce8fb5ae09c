import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";

import { fixtures, runAdapter, startLine } from "./helpers.js";

describe("adapter", () => {
  it("runs a task and reports its JSON output", async () => {
    const got = await runAdapter(startLine("greet", { name: "Ada" }));
    assert.equal(got.code, 0, got.stderr);
    assert.deepStrictEqual(got.messages, [
      {
        type: "result",
        output: { greeting: "hello Ada", run: { id: "run_1", taskId: "greet" }, cwd: got.cwd },
      },
    ]);
    assert.match(got.stdout, /greeting Ada\n/);
    assert.match(got.stdout, /logger line \{"run":"run_1"\}\n/);
    assert.match(got.stderr, /to stderr\n/);
    assert.equal(await readFile(join(got.cwd, "greeting.txt"), "utf8"), "hello Ada\n");
  });

  it("answers even when the agent half-closes after the start message", async () => {
    const got = await runAdapter(startLine("greet", { name: "Bo" }), { halfClose: true });
    assert.equal(got.code, 0, got.stderr);
    assert.equal((got.messages[0] as { type: string }).type, "result");
  });

  it("adds the start message's env to process.env before the task loads", async () => {
    const line = JSON.stringify({ ...JSON.parse(startLine("env")), env: { HELMR_RUN_ID: "run_env" } });
    const got = await runAdapter(line);
    assert.deepStrictEqual(got.messages, [{ type: "result", output: { runId: "run_env" } }]);
  });

  it("rejects an env that is not a map of strings", async () => {
    const line = JSON.stringify({ ...JSON.parse(startLine("env")), env: { N: 1 } });
    const got = await runAdapter(line);
    assert.equal(got.code, 1);
    assert.match(String((got.messages[0] as { message: string }).message), /env must map names to strings/);
  });

  it("sends ctx.wait.human to the worker and resumes with its answer", async () => {
    const requests: unknown[] = [];
    const got = await runAdapter(startLine("waitsForHuman"), {
      answer: (req) => {
        requests.push({ method: req.method, params: req.params });
        if (req.method === "wait.human") return { ok: true, data: { approved: true } };
        throw new Error("unexpected");
      },
    });
    assert.equal(got.code, 0, got.stderr);
    assert.deepStrictEqual(requests, [{ method: "wait.human", params: { displayText: "ok?" } }]);
    assert.deepStrictEqual(got.messages, [{ type: "result", output: { resolved: { approved: true }, approved: true } }]);
  });

  const ends: Array<[string, unknown, unknown]> = [
    ["a rejection", { ok: false, canceled: true, reason: "not now" }, { name: "WaitRejectedError", kind: "rejected", rejected: true, timedOut: false, reason: "not now" }],
    ["a timeout", { ok: false, timedOut: true }, { name: "WaitTimeoutError", kind: "timeout", rejected: false, timedOut: true, reason: null }],
  ];
  for (const [what, answer, want] of ends) {
    it(`throws ${what} as an error the task's SDK classes catch`, async () => {
      const got = await runAdapter(startLine("catchesWait", undefined, join(fixtures, "waits.js")), { answer: () => answer });
      assert.equal(got.code, 0, got.stderr);
      assert.deepStrictEqual(got.messages, [{ type: "result", output: want }]);
    });
  }

  it("fails the run with a WaitRejectedError the task does not catch", async () => {
    const got = await runAdapter(startLine("waitsForHuman"), { answer: () => ({ ok: false, canceled: true, reason: "not now" }) });
    const m = got.messages[0] as { type: string; name: string; message: string; stack: string };
    assert.deepStrictEqual([got.messages.length, m.type, m.name, m.message], [1, "error", "WaitRejectedError", 'human wait "ok?" was rejected: not now']);
    assert.match(m.stack, /fixtures\/tasks\.js/, "the stack reaches the task's await");
  });

  it("reports null for an undefined return value", async () => {
    const got = await runAdapter(startLine("nothing"));
    assert.deepStrictEqual(got.messages, [{ type: "result", output: null }]);
    assert.equal(got.code, 0);
  });

  it("exits after the result even if the task leaves timers running", async () => {
    const got = await runAdapter(startLine("lingering"));
    assert.deepStrictEqual(got.messages, [{ type: "result", output: "done" }]);
  });

  const failures: Array<[string, string, { name: string; message: RegExp; stack?: RegExp }]> = [
    ["a thrown Error", "fails", { name: "RangeError", message: /^out of range$/, stack: /RangeError: out of range\n\s+at / }],
    ["a thrown string", "throwsString", { name: "NonErrorThrown", message: /non-Error value: 'plain string'/ }],
    ["a BigInt output", "bigint", { name: "OutputError", message: /task "bigint" returned a value that is not JSON-serializable: .*BigInt/ }],
    ["a function output", "fn", { name: "OutputError", message: /not JSON-serializable: a function has no JSON form/ }],
    ["a wait the worker refuses", "waitsForHuman", { name: "RequestError", message: /^run_1 is not running$/ }],
    ["an unhandled rejection", "unhandled", { name: "Error", message: /^nobody caught me$/ }],
    ["an uncaught exception", "uncaught", { name: "TypeError", message: /^thrown from a timer$/ }],
    ["a task without run", "declaredOnly", { name: "AdapterError", message: /task "declared-only" .* has no run function/ }],
    ["an export that is not a task", "notATask", { name: "AdapterError", message: /export "notATask" of .* is not a Helmr task/ }],
    ["a missing export", "missing", { name: "AdapterError", message: /has no export "missing" \(exports: .*greet/ }],
  ];
  for (const [what, exportName, want] of failures) {
    it(`reports ${what} as one error message`, async () => {
      const got = await runAdapter(startLine(exportName), {
        answer: () => {
          throw new Error("run_1 is not running");
        },
      });
      assert.equal(got.code, 1, got.stderr);
      assert.equal(got.messages.length, 1, JSON.stringify(got.messages));
      const m = got.messages[0] as Record<string, unknown>;
      assert.equal(m.type, "error");
      assert.equal(m.name, want.name, JSON.stringify(m));
      assert.match(String(m.message), want.message);
      assert.equal(typeof m.stack, "string");
      if (want.stack) assert.match(String(m.stack), want.stack);
    });
  }

  it("reports an SDK brand it does not understand", async () => {
    const got = await runAdapter(startLine("future", undefined, join(fixtures, "future-sdk.js")));
    const m = got.messages[0] as Record<string, unknown>;
    assert.match(String(m.message), /incompatible @helmr\/sdk \(task brand version 99/);
  });

  it("reports a module that fails to import", async () => {
    const got = await runAdapter(startLine("x", undefined, join(fixtures, "broken.js")));
    assert.equal(got.code, 1);
    const m = got.messages[0] as Record<string, unknown>;
    assert.equal(m.type, "error");
    assert.match(String(m.message), /^import .*broken\.js: broken at import$/);
  });

  it("reports a malformed start message", async () => {
    const got = await runAdapter(JSON.stringify({ type: "start", module: "/x.mjs" }));
    assert.equal(got.code, 1);
    assert.match(String((got.messages[0] as Record<string, unknown>).message), /export must be a non-empty string/);
  });

  it("reports a line that is not JSON", async () => {
    const got = await runAdapter("{not json");
    assert.match(String((got.messages[0] as Record<string, unknown>).message), /malformed message on channel/);
  });

  it("reports a channel closed before the start message", async () => {
    const got = await runAdapter(undefined);
    assert.equal(got.code, 1);
    assert.match(String((got.messages[0] as Record<string, unknown>).message), /channel closed before the start message/);
  });
});
