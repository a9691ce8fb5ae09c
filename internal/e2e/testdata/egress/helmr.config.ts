import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "egress", dirs: ["./tasks"] });
