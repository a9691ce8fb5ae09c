import { image, sandbox, task } from "@helmr/sdk";

const sb = sandbox("s").image(image("i").from("helmr/bookworm-node22"));

// A task declared without a run function: deploy must refuse it.
export const norun = task({ id: "norun", sandbox: sb } as unknown as Parameters<typeof task>[0]);
