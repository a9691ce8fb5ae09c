import { image, sandbox, task } from "@helmr/sdk";

const sb = sandbox("s").image(image("i").from("helmr/bookworm-node22")).workspace("/tmp/work");
export const reserved = task({ id: "reserved", sandbox: sb, run: async () => 1 });
