import { image, sandbox, task } from "@helmr/sdk";

// The next version of deploybuild: its image's run step fails, so the
// deploy fails and the previous version stays current.
const app = image("app")
  .from("helmr/bookworm-node22")
  .run(["sh", "-c", "echo breaking-step-output; exit 3"]);

export const hello = task({ id: "app", sandbox: sandbox("app").image(app), run: async () => "unreachable" });
