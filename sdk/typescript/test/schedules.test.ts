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

describe("client.schedules", () => {
  it("sends each call to its route", async () => {
    const { FakeAPI, json } = await import("./fake-api.js");
    const { HelmrClient } = await import("../src/client/index.js");
    const api = new FakeAPI();
    await api.start();
    try {
      const sc = { id: "sched_1", project: "p", env: "dev", task: "t", type: "IMPERATIVE", cron: "0 * * * *", timezone: "UTC", active: true, createdAt: "", updatedAt: "" };
      api.handlers.set("POST /v1/schedules", (_s, res) => json(res, 201, sc));
      api.handlers.set("GET /v1/schedules", (_s, res) => json(res, 200, { schedules: [sc] }));
      api.handlers.set("PATCH /v1/schedules/sched_1", (_s, res) => json(res, 200, { ...sc, cron: "5 * * * *" }));
      api.handlers.set("POST /v1/schedules/sched_1/deactivate", (_s, res) => json(res, 200, { ...sc, active: false }));
      api.handlers.set("DELETE /v1/schedules/sched_1", (_s, res) => {
        res.statusCode = 204;
        res.end();
      });
      const client = new HelmrClient({ baseURL: api.url + "/", apiKey: "hk_k_s", project: "p" });
      const made = await client.schedules.create({ task: "t", cron: "0 * * * *", deduplicationKey: "k" });
      assert.equal(made.id, "sched_1");
      assert.deepEqual(JSON.parse(api.seen[0]?.body ?? ""), { task: "t", cron: "0 * * * *", deduplicationKey: "k" });
      assert.match(api.seen[0]?.url ?? "", /project=p&env=dev/);
      assert.equal((await client.schedules.list({ type: "IMPERATIVE" })).schedules.length, 1);
      assert.match(api.seen[1]?.url ?? "", /type=IMPERATIVE/);
      assert.equal((await client.schedules.update("sched_1", { cron: "5 * * * *" })).cron, "5 * * * *");
      assert.equal((await client.schedules.deactivate("sched_1")).active, false);
      await client.schedules.del("sched_1");
      assert.deepEqual(
        api.seen.map((s) => s.method),
        ["POST", "GET", "PATCH", "POST", "DELETE"],
      );
    } finally {
      api.server.close();
    }
  });
});
