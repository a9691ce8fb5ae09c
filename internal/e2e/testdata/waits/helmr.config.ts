import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "waits", dirs: ["./tasks"] });
