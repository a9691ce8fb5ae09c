import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { AbortTaskRunError, image, queue, sandbox, task } from "@helmr/sdk";

const sb = sandbox("flow").image(image("flow").from("helmr/bookworm-node22").workdir("/workspace")).resources({ cpu: 0.25, memory: "256Mi" });

// flaky fails its first two attempts and succeeds on the third; it counts
// attempts in its workspace, which every attempt shares.
export const flaky = task({
  id: "flaky",
  sandbox: sb,
  retry: { maxAttempts: 3, minTimeoutInMs: 700, factor: 2 },
  run: async () => {
    const n = (existsSync("attempts.txt") ? Number(readFileSync("attempts.txt", "utf8")) : 0) + 1;
    writeFileSync("attempts.txt", String(n));
    if (n < 3) throw new Error(`attempt ${n} fails on purpose`);
    return { attempts: n };
  },
});

// abort gives up at once, whatever its retry policy.
export const abort = task({
  id: "abort",
  sandbox: sb,
  retry: { maxAttempts: 5, minTimeoutInMs: 100 },
  run: async () => {
    throw new AbortTaskRunError("nothing to retry");
  },
});

const limited = queue({ name: "limited", concurrencyLimit: 2 });

// slow holds a slot of the limited queue for a while.
export const slow = task({
  id: "slow",
  sandbox: sb,
  queue: limited,
  run: async (p: { ms: number }) => {
    await new Promise((r) => setTimeout(r, p.ms));
    return "done";
  },
});

// tenant: one run per concurrency key at a time.
export const tenant = task({
  id: "tenant",
  sandbox: sb,
  queue: { name: "per-tenant", concurrencyLimit: 1 },
  run: async (p: { ms: number }) => {
    await new Promise((r) => setTimeout(r, p.ms));
    return "done";
  },
});

// lost waits for a minute on its first attempt (its worker is killed
// meanwhile) and answers at once on the next.
export const lost = task({
  id: "lost",
  sandbox: sb,
  retry: { maxAttempts: 2, minTimeoutInMs: 100 },
  run: async () => {
    const attempt = Number(process.env.HELMR_ATTEMPT);
    if (attempt === 1) await new Promise((r) => setTimeout(r, 60_000));
    return { attempt };
  },
});

const single = queue({ name: "single", concurrencyLimit: 1 });

// gate holds the single queue's only slot until a human answers; parked,
// it lets go of the slot.
export const gate = task({
  id: "gate",
  sandbox: sb,
  queue: single,
  run: async (_: unknown, ctx) => {
    const answer = await ctx.wait.human<{ ok: boolean }>({ displayText: "open the gate?" });
    return { gate: answer.ok };
  },
});

// quick runs in the single queue.
export const quick = task({
  id: "quick",
  sandbox: sb,
  queue: single,
  run: async () => "quick",
});

// defaulted declares no retry policy: the project's default (two attempts)
// retries its first failure.
export const defaulted = task({
  id: "defaulted",
  sandbox: sb,
  run: async () => {
    if (process.env.HELMR_ATTEMPT === "1") throw new Error("first attempt fails");
    return { attempt: Number(process.env.HELMR_ATTEMPT) };
  },
});
