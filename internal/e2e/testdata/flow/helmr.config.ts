import { defineConfig } from "@helmr/sdk";

// Tasks that declare no retry policy get this one.
export default defineConfig({ project: "flow", dirs: ["./tasks"], retry: { maxAttempts: 2, minTimeoutInMs: 200 } });
