import { image, sandbox, task } from "@helmr/sdk";

const img = image("notes").from("helmr/bookworm-node22").workdir("/workspace");

// A sandbox whose writable root is bounded at 48Mi (the worker's
// HELMR_ROOT_SIZE applies to the others). The task writes a file to its
// root and returns what that root held of it before: nothing, each time.
export const rooted = task({
  id: "rooted",
  sandbox: sandbox("rooted").image(img).resources({ rootSize: "48Mi" }),
  run: async () => {
    const { existsSync, writeFileSync } = await import("node:fs");
    const before = existsSync("/root/state.json");
    writeFileSync("/root/state.json", "{}");
    return { before };
  },
});
