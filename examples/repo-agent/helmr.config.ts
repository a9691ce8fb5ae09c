import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "repo-agent", dirs: ["./tasks"] });
