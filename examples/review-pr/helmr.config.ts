import { defineConfig } from "@helmr/sdk";

export default defineConfig({
  project: "github-pr-review",
  dirs: ["./tasks"],
});
