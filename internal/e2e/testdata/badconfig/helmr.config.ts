import { defineConfig } from "@helmr/sdk";

export default defineConfig({ project: "badconfig", dirs: ["./tasks"] ;
