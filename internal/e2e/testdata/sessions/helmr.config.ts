import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "sessions", dirs: ["./tasks"] });
