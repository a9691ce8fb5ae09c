import { image, sandbox, schedules } from "@helmr/sdk";

const sb = sandbox("tick").image(image("tick").from("helmr/bookworm-node22")).resources({ cpu: 1, memory: "128Mi" });

// Every two seconds (a six-field cron: the first field is seconds).
export const tick = schedules.task({
  id: "tick",
  cron: "*/2 * * * * *",
  sandbox: sb,
  run: async (p) => ({ tick: p.timestamp.toISOString(), last: p.lastTimestamp?.toISOString() ?? null }),
});

// No declared cron: runs only on imperative schedules.
export const report = schedules.task({
  id: "report",
  sandbox: sb,
  run: async (p) => ({ tenant: p.externalId ?? null }),
});
