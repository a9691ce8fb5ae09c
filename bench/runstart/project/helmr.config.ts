import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "bench", dirs: ["./tasks"] });
