import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "parkbench", dirs: ["./tasks"] });
