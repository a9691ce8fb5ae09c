import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "reserved", dirs: ["./tasks"] });
