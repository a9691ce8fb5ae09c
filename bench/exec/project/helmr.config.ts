import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "execbench", dirs: ["./tasks"] });
