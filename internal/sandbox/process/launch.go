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
type mounts struct {
	fds []int
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
	}
	return init, m, nil
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
