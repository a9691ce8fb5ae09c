import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "failing", dirs: ["./tasks"] });
