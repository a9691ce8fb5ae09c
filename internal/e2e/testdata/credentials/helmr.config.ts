import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "creds", dirs: ["./tasks"] });
