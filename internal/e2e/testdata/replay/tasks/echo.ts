import { image, queue, sandbox, task } from "@helmr/sdk";

const sb = sandbox("replay").image(image("replay").from("helmr/bookworm-node22").workdir("/workspace")).resources({ cpu: 0.25, memory: "256Mi" });

// gate is the queue the test pauses: its runs wait until it resumes.
const gate = queue({ name: "gate", concurrencyLimit: 4 });

// echo answers its payload, so that a replay's edited payload shows in
// its output.
export const echo = task({
  id: "echo",
  sandbox: sb,
  queue: gate,
  run: async (p: { n: number; edited?: boolean }) => p,
});
