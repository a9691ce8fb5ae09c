import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "children", dirs: ["./tasks"] });
