package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"

	"github.com/helmr/helmr/internal/sandbox/network"
)

// Spec defaults.
const (
	DefaultWorkspace = "/workspace"
	DefaultHostname  = "helmr-sandbox"
	// DefaultRootSize bounds a writable root whose spec sets no size.
	DefaultRootSize = 1 << 30
	// MinRootSize is the least root size a spec may set: the layer's
	// own bookkeeping (overlayfs' work directory) takes some of it.
	MinRootSize = 1 << 20
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Normalize fills the defaults every tier shares (workspace path,
// hostname, pids limit, root size) and checks what every tier needs: a usable id, a
// clean workspace path outside the reserved ones, IP DNS servers, existing
// host directories, non-negative limits. Tiers add their own checks. It
// refuses a WorkspaceImage: see NormalizeWithImage.
func (s *Spec) Normalize(defaultPids int64) error {
	if s.WorkspaceImage != "" {
		return errors.New("this tier takes the workspace as a host directory, not an image")
	}
	return s.normalize(defaultPids)
}

// NormalizeWithImage is Normalize for a tier that takes the workspace as
// an image (WorkspaceImage): one of WorkspaceImage, a regular file, and
// WorkspaceHost.
func (s *Spec) NormalizeWithImage(defaultPids int64) error {
	if s.WorkspaceImage == "" {
		return s.normalize(defaultPids)
	}
	if s.WorkspaceHost != "" {
		return errors.New("WorkspaceHost and WorkspaceImage exclude each other")
	}
	if fi, err := os.Stat(s.WorkspaceImage); err != nil || !fi.Mode().IsRegular() || !filepath.IsAbs(s.WorkspaceImage) {
		return fmt.Errorf("workspace image %q is not an absolute path to a file", s.WorkspaceImage)
	}
	return s.normalize(defaultPids)
}

func (s *Spec) normalize(defaultPids int64) error {
	if !idPattern.MatchString(s.ID) {
		return fmt.Errorf("id %q must match %s", s.ID, idPattern)
	}
	if s.Workspace == "" {
		s.Workspace = DefaultWorkspace
	}
	if !filepath.IsAbs(s.Workspace) || filepath.Clean(s.Workspace) != s.Workspace || IsReserved(s.Workspace) {
		return fmt.Errorf("workspace %q must be a clean absolute path outside %v", s.Workspace, ReservedPaths)
	}
	if s.Hostname == "" {
		s.Hostname = DefaultHostname
	}
	if s.Network.Attaches() {
		if err := s.Network.Validate(); err != nil {
			return err
		}
		if len(s.DNS) == 0 {
			s.DNS = []string{network.DNSAddr.String()}
		}
	}
	for _, ns := range s.DNS {
		if net.ParseIP(ns) == nil {
			return fmt.Errorf("dns server %q is not an IP address", ns)
		}
	}
	if len(s.RootLayers) == 0 {
		return errors.New("no root layers")
	}
	if (s.RootUpper == "") != (s.RootWork == "") {
		return errors.New("RootUpper and RootWork go together")
	}
	var dirs []string
	if s.WorkspaceImage == "" && (s.WorkspaceHost != "" || s.RootUpper == "") {
		dirs = append(dirs, s.WorkspaceHost)
	}
	dirs = append(dirs, s.RootLayers...)
	if s.RootUpper != "" {
		dirs = append(dirs, s.RootUpper, s.RootWork)
	}
	for _, m := range s.Mounts {
		// /run/secrets takes a build step's secret files; nothing else
		// goes into the runtime's own trees.
		if !filepath.IsAbs(m.Dest) || filepath.Clean(m.Dest) != m.Dest || (IsReserved(m.Dest) && m.Dest != "/run/secrets") || m.Dest == s.Workspace {
			return fmt.Errorf("mount destination %q must be a clean absolute path outside %v and the workspace", m.Dest, ReservedPaths)
		}
		dirs = append(dirs, m.Source)
	}
	if s.HelmrHost != "" {
		dirs = append(dirs, s.HelmrHost)
	}
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() || !filepath.IsAbs(d) {
			return fmt.Errorf("%q is not an absolute path to a directory", d)
		}
	}
	if s.CPU < 0 || s.MemoryBytes < 0 || s.PidsLimit < 0 || s.RootSizeBytes < 0 {
		return errors.New("negative resource limit")
	}
	if s.RootSizeBytes == 0 {
		s.RootSizeBytes = DefaultRootSize
	}
	if s.RootSizeBytes < MinRootSize {
		return fmt.Errorf("root size %d is below the minimum of %d bytes", s.RootSizeBytes, MinRootSize)
	}
	if s.PidsLimit == 0 {
		s.PidsLimit = defaultPids
	}
	return nil
}
