import { readFileSync } from "node:fs";
import { image, sandbox, task } from "@helmr/sdk";

// Built at deploy: the run step's output shows in helmr deploy, and the run
// finds its file.
const app = image("app")
  .from("helmr/bookworm-node22")
  .run(["sh", "-c", "echo step-ran; echo built-at-deploy > /etc/app-built"]);

export const hello = task({
  id: "app",
  sandbox: sandbox("app").image(app),
  run: async () => readFileSync("/etc/app-built", "utf8").trim(),
});
