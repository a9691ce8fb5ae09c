import { image, sandbox, task } from "@helmr/sdk";

const sb = sandbox("s").image(image("i").from("helmr/bookworm-node22"));
export const first = task({ id: "same", sandbox: sb, run: async () => 1 });
