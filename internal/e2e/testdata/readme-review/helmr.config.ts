// The product README's project configuration, verbatim.
import { defineConfig } from "@helmr/sdk"
export default defineConfig({
project: "github-pr-review",
dirs: ["./tasks"],
})
