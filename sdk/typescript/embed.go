// Package sdkts embeds the sources of the TypeScript SDK, @helmr/sdk. The
// deploy step bundles each task module with "@helmr/sdk" resolved to Entry
// in FS; the SDK imports nothing outside src/ and no Node.js built-ins.
package sdkts

import "embed"

// FS holds src/, the SDK's TypeScript sources.
//
//go:embed src
var FS embed.FS

// Entry is the module "@helmr/sdk" resolves to inside FS.
const Entry = "src/index.ts"

// PackageJSON is the SDK's package.json: its name and version (the
// tarball scripts/sdk-pack.sh packs is helmr-sdk-VERSION.tgz) and the dev
// tools it builds with, which `helmr init` pins in a new project.
//
//go:embed package.json
var PackageJSON []byte

// ManifestEntry is the module "@helmr/sdk/manifest" resolves to inside FS.
const ManifestEntry = "src/manifest.ts"

// ClientEntry is the module "@helmr/sdk/client" resolves to inside FS.
const ClientEntry = "src/client/index.ts"
