import { image, sandbox, task } from "@helmr/sdk";

const sb = sandbox("execbench").image(image("execbench").from("helmr/bookworm-node22").workdir("/workspace"));

// The benchmark's workspace runs in this task's sandbox; the benchmark
// never runs the task itself, only direct operations on the workspace.
export const shell = task({
  id: "shell",
  sandbox: sb,
  run: async () => null,
});
