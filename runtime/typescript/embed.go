// Package runtimets embeds the TypeScript sources of Helmr's guest adapter and
// deploy-time index runner. The Go side bundles them with esbuild (platform
// node, format esm, target node20); they import only node: built-ins and each
// other, through relative ".js" specifiers that name ".ts" files.
package runtimets

import "embed"

// FS holds src/: the entry points AdapterEntry and IndexRunnerEntry and the
// files they import.
//
//go:embed src
var FS embed.FS

// Entry points inside FS.
const (
	// AdapterEntry runs inside the sandbox as /opt/helmr/runtime/adapter.mjs,
	// with fd 3 as the newline-delimited JSON channel to the agent.
	AdapterEntry = "src/adapter.ts"
	// IndexRunnerEntry runs on the host at deploy time and prints the task
	// manifests (or the project config) of bundled modules as JSON.
	IndexRunnerEntry = "src/index-runner.ts"
)
