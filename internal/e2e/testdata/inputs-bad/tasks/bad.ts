import { image, sandbox, task } from "@helmr/sdk";

const sb = sandbox("bad").image(image("bad").from("helmr/bookworm-node22"));

// "text" is not a JSON Schema type: the deploy is refused.
export const bad = task({
  id: "bad",
  sandbox: sb,
  input: { type: "object", properties: { repo: { type: "text" } } },
  run: async () => "unreachable",
});
