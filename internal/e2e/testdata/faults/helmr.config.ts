import { defineConfig } from "@helmr/sdk";

// The fault test's tasks retry generously: a worker killed under a run is
// not the run's fault, and the test counts what a retry could not save.
export default defineConfig({
  project: "faults",
  dirs: ["./tasks"],
  retry: { maxAttempts: 8, minTimeoutInMs: 200, factor: 1.5, maxTimeoutInMs: 2000 },
});
