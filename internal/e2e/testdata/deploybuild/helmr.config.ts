import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "deploybuild", dirs: ["./tasks"] });
