import assert from "node:assert/strict";
import { afterEach, describe, it } from "node:test";

import {
  ChildRunError,
  image,
  sandbox,
  task,
  tasks,
  type RunHandle,
  type TaskRunResult,
} from "../../../sdk/typescript/src/index.js";
import { createTasks, duration, installTasks, TASKS_BRIDGE } from "../src/tasks.js";
import { runAdapter, startLine } from "./helpers.js";
import { join } from "node:path";
import { fixtures } from "./helpers.js";

const sb = sandbox("s").image(image("i").from("helmr/bookworm-node22"));
const square = task({ id: "square", sandbox: sb, run: async (p: { n: number }) => ({ square: p.n * p.n }) });
const noPayload = task({ id: "tick", sandbox: sb, run: async () => "tock" });

/** A worker stand-in: records requests and answers with answer(method, params). */
function fakeWorker(answer: (method: string, params: { items: Array<{ taskId: string; payload?: unknown; options?: unknown }> }) => unknown) {
  const requests: Array<{ method: string; params: unknown }> = [];
  const request = (method: string, params?: unknown) => {
    requests.push({ method, params });
    try {
      return Promise.resolve(answer(method, params as never));
    } catch (err) {
      return Promise.reject(err as Error);
    }
  };
  return { requests, request };
}

/** results answers a triggerAndWait with each item completed (its payload's n squared), or failed for n < 0. */
function results(_: string, params: { items: Array<{ taskId: string; payload?: unknown }> }) {
  return {
    ok: true,
    data: params.items.map((it, i) => {
      const n = (it.payload as { n: number }).n;
      return n < 0
        ? { ok: false, id: `run_${i}`, taskId: it.taskId, status: "FAILED", error: { class: "task_process", message: "negative", name: "RangeError" } }
        : { ok: true, id: `run_${i}`, taskId: it.taskId, status: "COMPLETED", output: { square: n * n } };
    }),
  };
}

describe("tasks", () => {
  afterEach(() => {
    delete (globalThis as Record<symbol, unknown>)[TASKS_BRIDGE];
  });

  it("triggers a child with its options as the worker takes them", async () => {
    const w = fakeWorker(() => ({ runs: [{ id: "run_c", taskId: "square", created: true }] }));
    const t = createTasks(w.request);
    const at = new Date("2030-01-02T03:04:05Z");
    const h: RunHandle = await t.trigger(square, { n: 2 }, {
      idempotencyKey: "k",
      idempotencyKeyTTL: "2d",
      tags: ["a", "b"],
      queue: { name: "math" },
      concurrencyKey: "tenant-1",
      priority: 5,
      delay: at,
      ttl: 600,
    });
    assert.deepStrictEqual(h, { id: "run_c", taskId: "square" });
    assert.deepStrictEqual(w.requests, [
      {
        method: "tasks.trigger",
        params: {
          items: [
            {
              taskId: "square",
              payload: { n: 2 },
              options: {
                idempotencyKey: "k",
                idempotencyKeyTTL: "172800000ms",
                tags: ["a", "b"],
                queue: "math",
                concurrencyKey: "tenant-1",
                priority: 5,
                delay: "2030-01-02T03:04:05.000Z",
                ttl: "600s",
              },
            },
          ],
        },
      },
    ]);
    await t.trigger("tick");
    assert.deepStrictEqual(w.requests[1], { method: "tasks.trigger", params: { items: [{ taskId: "tick" }] } });
  });

  it("waits for a child and resolves with its typed result, unwrap giving the output", async () => {
    const w = fakeWorker(results);
    installTasks(w.request);
    const r = await tasks.triggerAndWait(square, { n: 3 });
    assert.deepStrictEqual({ ...r }, { ok: true, id: "run_0", taskId: "square", output: { square: 9 } });
    assert.ok(r.ok);
    const sq: number = r.output.square; // typed by square's output
    assert.equal(sq, 9);
    assert.deepStrictEqual(r.unwrap(), { square: 9 });
    assert.equal(JSON.stringify(r), '{"ok":true,"id":"run_0","taskId":"square","output":{"square":9}}');
    const out: { square: number } = await tasks.triggerAndWait(square, { n: 4 }).unwrap();
    assert.deepStrictEqual(out, { square: 16 });
    assert.deepStrictEqual(w.requests.map((q) => q.method), ["tasks.triggerAndWait", "tasks.triggerAndWait"]);
  });

  it("resolves a batch's results in order, a failed child's unwrap throwing a ChildRunError", async () => {
    installTasks(fakeWorker(results).request);
    const { runs } = await tasks.batchTriggerAndWait(square, [{ payload: { n: 1 } }, { payload: { n: -1 } }, { payload: { n: 3 } }]);
    const typed: TaskRunResult<{ square: number }>[] = runs;
    assert.deepStrictEqual(
      typed.map((r) => (r.ok ? r.output.square : r.error)),
      [1, { status: "FAILED", class: "task_process", message: "negative", name: "RangeError" }, 9],
    );
    const failed = runs[1]!;
    assert.throws(
      () => failed.unwrap(),
      (err: unknown) => {
        assert.ok(err instanceof ChildRunError, `${String(err)} is not the SDK's ChildRunError`);
        assert.deepStrictEqual([err.runId, err.taskId, err.status, err.message], ["run_1", "square", "FAILED", "child run run_1 (task square) ended FAILED: negative"]);
        return true;
      },
    );
    await assert.rejects(tasks.triggerAndWait(square, { n: -2 }).unwrap(), ChildRunError);
  });

  it("triggers a batch without waiting", async () => {
    const w = fakeWorker((_, p) => ({ runs: p.items.map((it, i) => ({ id: `run_${i}`, taskId: it.taskId, created: true })) }));
    installTasks(w.request);
    const { runs } = await tasks.batchTrigger(square, [{ payload: { n: 1 } }, { payload: { n: 2 }, options: { priority: 1 } }]);
    assert.deepStrictEqual(runs, [
      { id: "run_0", taskId: "square" },
      { id: "run_1", taskId: "square" },
    ]);
    assert.deepStrictEqual((w.requests[0]!.params as { items: unknown[] }).items, [
      { taskId: "square", payload: { n: 1 } },
      { taskId: "square", payload: { n: 2 }, options: { priority: 1 } },
    ]);
  });

  it("throws when the wait for children ends without their results", async () => {
    installTasks(fakeWorker(() => ({ ok: false, canceled: true, reason: "the run ended (CANCELED)" })).request);
    await assert.rejects(tasks.triggerAndWait(square, { n: 1 }), /ended without their results \(canceled: the run ended \(CANCELED\)\)/);
  });

  const refused: Array<[string, () => Promise<unknown>, RegExp]> = [
    ["an unknown option", () => tasks.trigger(square, { n: 1 }, { delai: "1h" } as never), /unknown option "delai"/],
    ["a bad tag list", () => tasks.trigger(square, { n: 1 }, { tags: [1] as never }), /tags must be a string or an array of strings/],
    ["a fractional priority", () => tasks.trigger(square, { n: 1 }, { priority: 1.5 }), /priority must be a whole number/],
    ["a payload that is not JSON", () => tasks.trigger(square, { n: 1n } as never), /payload is not JSON-serializable/],
    ["an empty batch", () => tasks.batchTrigger(square, []), /items must be a non-empty array/],
    ["a batch of 501", () => tasks.batchTrigger(square, Array.from({ length: 501 }, () => ({ payload: { n: 1 } }))), /at most 500 items/],
    ["no task", () => tasks.trigger({} as typeof square, { n: 1 }), /task must be a task/],
  ];
  for (const [what, call, want] of refused) {
    it(`refuses ${what} before asking the worker`, async () => {
      const w = fakeWorker(() => assert.fail("asked the worker"));
      installTasks(w.request);
      await assert.rejects(call(), want);
      assert.equal(w.requests.length, 0);
    });
  }

  it("says where tasks work outside a run", async () => {
    await assert.rejects(tasks.trigger(square, { n: 1 }), /from inside a task's run/);
    await assert.rejects(tasks.triggerAndWait(square, { n: 1 }).unwrap(), /from inside a task's run/);
  });

  it("converts durations to Go's", () => {
    const cases: Array<[unknown, string]> = [
      ["1h", "1h"],
      ["1h30m", "1h30m"],
      ["1d12h", "129600000ms"],
      ["2d", "172800000ms"],
      ["1w", "604800000ms"],
      ["500ms", "500ms"],
      [90, "90s"],
      ["2030-01-02T03:04:05Z", "2030-01-02T03:04:05Z"],
    ];
    for (const [v, want] of cases) assert.equal(duration("d", v), want, `duration(${JSON.stringify(v)})`);
    assert.throws(() => duration("ttl", -1), /seconds >= 0/);
  });

  it("types payloads and outputs by the task object", () => {
    // Compile-time checks only: the calls are never made.
    const never = false as boolean;
    if (never) {
      // @ts-expect-error square's payload is { n: number }
      void tasks.trigger(square, { m: 1 });
      void tasks.trigger(noPayload);
      void tasks.trigger<typeof square>("square", { n: 1 });
      // @ts-expect-error square's payload by id, typed by its type argument
      void tasks.trigger<typeof square>("square", { n: "1" });
      void tasks.triggerAndWait(noPayload).then((r) => {
        if (r.ok) {
          const s: string = r.output;
          void s;
        }
      });
      void tasks.batchTriggerAndWait(square, [{ payload: { n: 1 } }]).then(({ runs }) => {
        const r = runs[0]!;
        // @ts-expect-error output is only there when ok
        void r.output.square;
      });
    }
  });
});

describe("adapter tasks", () => {
  it("runs a parent that waits for a batch of children through the channel", async () => {
    const requests: Array<{ method: string; params?: unknown }> = [];
    const got = await runAdapter(startLine("parent", undefined, join(fixtures, "children.js")), {
      answer: (req) => {
        requests.push({ method: req.method, params: req.params });
        const items = (req.params as { items: Array<{ taskId: string; payload: { n: number } }> }).items;
        if (req.method === "tasks.trigger") return { runs: [{ id: "run_later", taskId: "square", created: true }] };
        return {
          ok: true,
          data: items.map((it, i) =>
            it.payload.n === 2
              ? { ok: false, id: `run_${i}`, taskId: "square", status: "TIMED_OUT", error: { class: "timeout", message: "ran past its maxDuration" } }
              : { ok: true, id: `run_${i}`, taskId: "square", status: "COMPLETED", output: { n: it.payload.n, square: it.payload.n ** 2 } },
          ),
        };
      },
    });
    assert.equal(got.code, 0, got.stderr);
    assert.deepStrictEqual(got.messages, [
      {
        type: "result",
        output: {
          squares: [1, 9],
          failed: [{ id: "run_1", status: "TIMED_OUT", message: "ran past its maxDuration", caught: true }],
          fired: { id: "run_later", taskId: "square" },
        },
      },
    ]);
    assert.deepStrictEqual(requests, [
      {
        method: "tasks.triggerAndWait",
        params: {
          items: [1, 2, 3].map((n) => ({ taskId: "square", payload: { n }, options: { idempotencyKey: `sq-${n}` } })),
        },
      },
      { method: "tasks.trigger", params: { items: [{ taskId: "square", payload: { n: 4 }, options: { tags: ["later"], delay: "1h" } }] } },
    ]);
  });
});
