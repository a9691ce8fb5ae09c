import { mkdir, readFile, writeFile } from "node:fs/promises";
import { image, sandbox, task } from "@helmr/sdk";

const img = image("faults").from("helmr/bookworm-node22").workdir("/workspace");
const sb = sandbox("faults").image(img).resources({ cpu: 0.5, memory: "128Mi" });

// short returns its payload at once.
export const short = task({
  id: "short",
  sandbox: sb,
  run: async (payload: { i: number }) => ({ i: payload.i }),
});

// approval draws a nonce, keeps it only in memory (and logs it), waits for
// a human (long enough to be parked), and returns it: a run restored from
// its checkpoint returns the nonce it logged before it parked.
export const approval = task({
  id: "approval",
  sandbox: sb,
  run: async (payload: { i: number }, ctx) => {
    const nonce = Math.random().toString(36).slice(2);
    console.log(`nonce ${nonce}`);
    const answer = await ctx.wait.human.result<{ ok: boolean }>({ displayText: `run ${payload.i}?` });
    return { i: payload.i, nonce, ok: answer.ok };
  },
});

// writer writes files/<key>.txt in its workspace and reads it back.
export const writer = task({
  id: "writer",
  sandbox: sb,
  run: async (payload: { key: string }) => {
    await mkdir("files", { recursive: true });
    await writeFile(`files/${payload.key}.txt`, payload.key);
    return { key: await readFile(`files/${payload.key}.txt`, "utf8") };
  },
});
