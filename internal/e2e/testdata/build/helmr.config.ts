import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "build", dirs: ["./tasks"] });
