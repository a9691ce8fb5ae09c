import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "replay", dirs: ["./tasks"] });
