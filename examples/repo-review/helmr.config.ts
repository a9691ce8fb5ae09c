import { defineConfig } from "@helmr/sdk";

export default defineConfig({
  project: "repo-review",
  dirs: ["./tasks"],
});
