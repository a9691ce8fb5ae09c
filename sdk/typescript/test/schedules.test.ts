import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { image, sandbox, schedules, type ScheduledTaskPayload, type TaskContext } from "../src/index.js";
import { taskManifests } from "../src/manifest.js";

const sb = sandbox("cron").image(image("cron").from("helmr/bookworm-node22"));

describe("schedules.task", () => {
  it("puts the declared schedule in the manifest", () => {
    const nightly = schedules.task({
      id: "nightly",
      cron: { pattern: "0 2 * * *", timezone: "Europe/Paris" },
      sandbox: sb,
      run: async () => "done",
    });
    const every = schedules.task({ id: "every-2s", cron: "*/2 * * * * *", sandbox: sb, run: () => 1 });
    const imperativeOnly = schedules.task({ id: "on-demand", sandbox: sb, run: () => 1 });
    const [a, b, c] = taskManifests({ a: every, b: nightly, c: imperativeOnly }, "tasks/cron.mjs");
    assert.deepEqual(a?.schedule, { cron: "*/2 * * * * *" });
    assert.deepEqual(b?.schedule, { cron: "0 2 * * *", timezone: "Europe/Paris" });
    assert.equal(c?.schedule, undefined);
    assert.equal(b?.hasRun, true);
    assert.equal(b?.id, "nightly");
  });

  it("gives run the payload's times as Dates", async () => {
    let got: ScheduledTaskPayload | undefined;
    const t = schedules.task({
      id: "seen",
      cron: "0 * * * *",
      sandbox: sb,
      run: (p) => {
        got = p;
        return p.timestamp.getTime();
      },
    });
    const wire = {
      type: "IMPERATIVE",
      timestamp: "2026-01-15T12:00:00Z",
      lastTimestamp: "2026-01-15T11:00:00Z",
      timezone: "UTC",
      scheduleId: "sched_1",
      externalId: "tenant-1",
      upcoming: ["2026-01-15T13:00:00Z"],
    };
    const out = await t.run?.(wire as never, {} as TaskContext);
    assert.equal(out, Date.parse("2026-01-15T12:00:00Z"));
    assert.ok(got?.lastTimestamp instanceof Date);
    assert.equal(got?.lastTimestamp?.toISOString(), "2026-01-15T11:00:00.000Z");
    assert.equal(got?.externalId, "tenant-1");
    assert.equal(got?.upcoming[0]?.toISOString(), "2026-01-15T13:00:00.000Z");
    await assert.rejects(async () => t.run?.({ hello: 1 } as never, {} as TaskContext), /payload must come from a schedule/);
  });

  const bad: Array<[string, () => unknown, RegExp]> = [
    ["an empty cron", () => schedules.task({ id: "t", cron: " ", sandbox: sb, run: () => 1 }), /cron must be/],
    ["a cron of the wrong type", () => schedules.task({ id: "t", cron: 5 as never, sandbox: sb, run: () => 1 }), /cron must be/],
    ["an empty zone", () => schedules.task({ id: "t", cron: { pattern: "0 * * * *", timezone: "" }, sandbox: sb, run: () => 1 }), /timezone/],
    ["no run", () => schedules.task({ id: "t", cron: "0 * * * *", sandbox: sb } as never), /run must be a function/],
  ];
  for (const [name, fn, want] of bad) {
    it(`rejects ${name}`, () => assert.throws(fn, want));
  }
});
