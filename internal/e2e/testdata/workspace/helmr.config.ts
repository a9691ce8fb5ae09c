import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "workspace", dirs: ["./tasks"] });
