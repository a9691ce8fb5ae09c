import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "inputsbad", dirs: ["./tasks"] });
