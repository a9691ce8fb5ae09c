import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "dupe", dirs: ["./tasks"] });
