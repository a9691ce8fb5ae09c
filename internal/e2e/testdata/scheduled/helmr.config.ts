import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "scheduled", dirs: ["./tasks"] });
