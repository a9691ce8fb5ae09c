import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "secrets", dirs: ["./tasks"] });
