// Package envdpb holds E2B's envd wire protocol as Go code: the process and
// filesystem Connect services that E2B's SDKs call inside a sandbox.
//
// The .proto files under proto/e2b are recovered from the serialized
// descriptors in the published SDKs (PyPI e2b 2.63.0, npm e2b 2.51.0) and the
// subpackages processpb and filesystempb (with their Connect packages) are
// generated from them by scripts/gen-e2b-proto.sh; do not edit them by hand.
// The tests here hold the generated descriptors to the SDKs' and show that
// Connect's JSON codec carries a server stream the way the SDKs read it.
package envdpb
