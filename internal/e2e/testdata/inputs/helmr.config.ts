import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "inputs", dirs: ["./tasks"] });
