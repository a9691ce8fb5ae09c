import { defineConfig } from "@helmr/sdk";

export default defineConfig({
  project: "hello",
  dirs: ["./tasks"],
});
