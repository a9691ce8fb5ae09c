import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "flow", dirs: ["./tasks"] });
