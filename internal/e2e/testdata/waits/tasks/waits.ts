import { readFile, writeFile } from "node:fs/promises";
import { image, sandbox, task } from "@helmr/sdk";

const img = image("waits").from("helmr/bookworm-node22").workdir("/workspace");
const sb = sandbox("waits").image(img).resources({ cpu: 1, memory: "256Mi" });

// approval computes state in memory and in its workspace, asks a human, and
// returns the answer with the state, which must have survived the wait.
export const approval = task({
  id: "approval",
  sandbox: sb,
  run: async (payload: { n: number }, ctx) => {
    const squares = Array.from({ length: payload.n }, (_, i) => i * i);
    await writeFile("state.txt", squares.join(","));
    console.log("computed state, asking a human");
    const answer = await ctx.wait.human.result<{ ok: boolean }>({
      displayText: "Ship it?",
      schema: { type: "object", required: ["ok"], properties: { ok: { type: "boolean" } } },
    });
    console.log("the human answered");
    return { answer, squares, file: await readFile("state.txt", "utf8") };
  },
});

// token creates a token, prints where to complete it, and waits for it.
export const token = task({
  id: "token",
  sandbox: sb,
  run: async (payload: { timeoutSeconds?: number }, ctx) => {
    const t = await ctx.wait.createToken({
      tags: ["e2e"],
      ...(payload.timeoutSeconds ? { timeout: { seconds: payload.timeoutSeconds } } : {}),
    });
    console.log(`token ${t.id} ${t.url ?? "-"}`);
    return await ctx.wait.forToken<unknown>(t);
  },
});

// timer waits longer than its maxDuration: waiting does not count.
export const timer = task({
  id: "timer",
  sandbox: sb,
  maxDuration: 2,
  run: async (_: unknown, ctx) => {
    const t0 = Date.now();
    await ctx.wait.for({ seconds: 3 });
    return { elapsedMs: Date.now() - t0 };
  },
});

// quick finishes at once: it shows a slot is free.
export const quick = task({
  id: "quick",
  sandbox: sb,
  run: async () => "done",
});

// relapse is approval that goes on working after the answer (afterMs), so
// its worker can be lost after the restore: it is retried from its
// checkpoint. Its nonce, drawn before the wait, shows whose memory the
// retry has.
export const relapse = task({
  id: "relapse",
  sandbox: sb,
  retry: { maxAttempts: 2, minTimeoutInMs: 100 },
  run: async (payload: { afterMs: number }, ctx) => {
    const nonce = Math.random().toString(36).slice(2);
    await writeFile("nonce.txt", nonce);
    console.log(`nonce ${nonce}, asking a human`);
    const answer = await ctx.wait.human.result<{ ok: boolean }>({ displayText: "Go on?" });
    console.log(`answered, working ${payload.afterMs} ms`);
    await new Promise((r) => setTimeout(r, payload.afterMs));
    return { answer, nonce, file: await readFile("nonce.txt", "utf8") };
  },
});
