import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "norun", dirs: ["./tasks"] });
