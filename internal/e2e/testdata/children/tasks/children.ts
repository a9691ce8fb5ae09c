import { readFile, writeFile } from "node:fs/promises";
import { image, sandbox, task, tasks } from "@helmr/sdk";

const img = image("children").from("helmr/bookworm-node22").workdir("/workspace");
const sb = sandbox("children").image(img).resources({ cpu: 1, memory: "256Mi" });

// square runs in the squares queue (the test pauses it to hold children
// back while their parent is parked).
export const square = task({
  id: "square",
  sandbox: sb,
  queue: { name: "squares" },
  run: async (p: { n: number }) => {
    if (p.n < 0) throw new RangeError(`cannot square ${p.n} here`);
    return { n: p.n, square: p.n * p.n };
  },
});

// parent keeps state in memory and in its workspace, waits for a batch of
// squares (typed by the square task), and returns what it got with its
// state, which must have survived the wait.
export const parent = task({
  id: "parent",
  sandbox: sb,
  run: async (p: { ns: number[] }) => {
    const nonce = Math.random().toString(36).slice(2);
    await writeFile("nonce.txt", nonce);
    const { runs } = await tasks.batchTriggerAndWait(
      square,
      p.ns.map((n) => ({ payload: { n }, options: { idempotencyKey: `square-${n}`, tags: ["e2e"] } })),
    );
    const results = runs.map((r) => (r.ok ? { id: r.id, square: r.output.square } : { id: r.id, status: r.error.status, name: r.error.name, error: r.error.message }));
    return { results, stateKept: (await readFile("nonce.txt", "utf8")) === nonce };
  },
});
