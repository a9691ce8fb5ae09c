package process

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent"
	"github.com/helmr/helmr/internal/sandbox"
)

// mounts are the image layers, the workspace and /opt/helmr as detached
// mounts cloned by the worker (open_tree), sent to the agent with init
// (SCM_RIGHTS) and named "fd:N" there, N indexing fds; the agent attaches
// them in its own mount namespace. Neither bind mounts nor overlayfs accept
// a path that lies in another mount namespace, as a descriptor the worker
// opened does, and reaching them by path would need every parent to be
// searchable by the sandbox's host uid. Passing them at init rather than at
// clone time lets an agent be started before its sandbox is known (the warm
// pool), and is the one way for every start. Only the state dir is reached
// by path, so StateDir's parents must be searchable (New checks).
//
// The layers are idmapped into the sandbox's user namespace (see idmap)
// before they are sent: the sandbox's root is writable (a copy-on-write
// layer the agent mounts, see guest.Setup) and overlayfs copies a file up
// with its owner, which must be an id of that namespace; and the image's
// root must own, in the sandbox, what it owns in the image, as in a
// container: /usr, /etc and /root belong to the sandbox's root rather
// than to the overflow id.
type mounts struct {
	fds      []int
	layers   []int // indexes into fds of the root layers
	idmapped bool
}

// initFor builds spec's init and the mounts it names.
func initFor(spec sandbox.Spec, stateDir string) (init *agent.Init, m *mounts, err error) {
	m = &mounts{}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	init = &agent.Init{
		StateDir: stateDir, Workspace: spec.Workspace, Hostname: spec.Hostname, DNS: spec.DNS,
		RootSize: spec.RootSizeBytes,
		// The agent's own binary, inherited as fd 4 (see spawn).
		CloseFDs: []int{4},
	}
	if init.WorkspaceSource, err = m.clone(spec.WorkspaceHost); err != nil {
		return nil, nil, fmt.Errorf("clone workspace mount: %w", err)
	}
	if spec.HelmrHost != "" {
		if init.HelmrSource, err = m.clone(spec.HelmrHost); err != nil {
			return nil, nil, fmt.Errorf("clone helmr mount: %w", err)
		}
	}
	for _, layer := range spec.RootLayers {
		ref, err := m.clone(layer)
		if err != nil {
			return nil, nil, fmt.Errorf("open root layer: %w", err)
		}
		init.RootLayers = append(init.RootLayers, ref)
		m.layers = append(m.layers, len(m.fds)-1)
	}
	return init, m, nil
}

// idmap makes the layers show their files' owners as the user namespace
// of process pid (the agent) sees them: on-disk id N becomes the
// sandbox's id N (host UIDBase+N), for N in the mapped range; ids outside
// it stay the overflow id. Each agent maps the same range, so layers
// idmapped for one agent serve another (a warm agent that failed and the
// fresh one that replaces it): idmap does its work once. The layers'
// filesystem must support idmapped mounts (ext4, xfs, btrfs, tmpfs from
// Linux 6.3, ...).
func (m *mounts) idmap(pid int) error {
	if m.idmapped {
		return nil
	}
	ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the agent's user namespace: %w", err)
	}
	defer unix.Close(ns)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns)}
	for i, n := range m.layers {
		if err := unix.MountSetattr(m.fds[n], "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
			return fmt.Errorf("idmap root layer %d (the layer cache's filesystem must support idmapped mounts): %w", i, err)
		}
	}
	m.idmapped = true
	return nil
}

// clone adds a detached recursive bind of dir and returns its "fd:N" name.
func (m *mounts) clone(dir string) (string, error) {
	if len(m.fds) == agent.MaxFDs {
		return "", fmt.Errorf("%w: more than %d mounts", sandbox.ErrInvalidSpec, agent.MaxFDs)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return "", fmt.Errorf("open_tree %s: %w", dir, err)
	}
	m.fds = append(m.fds, fd)
	return "fd:" + strconv.Itoa(len(m.fds)-1), nil
}

// close closes the worker's copies of the mounts.
func (m *mounts) close() {
	for _, fd := range m.fds {
		_ = unix.Close(fd)
	}
	m.fds = nil
}
