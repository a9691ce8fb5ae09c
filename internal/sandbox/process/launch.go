package process

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent"
)

// launch is what the agent is started with: its end of the stream on fd 3,
// the agent binary as an O_PATH descriptor (executed as /proc/self/fd/N),
// and the image layers, the workspace and /opt/helmr as detached mounts
// cloned by the host (open_tree, named "fd:N" in init) that the agent
// attaches in its own mount namespace. Neither bind mounts nor overlayfs
// accept a path that lies in another mount namespace, as a descriptor the
// host opened does, and reaching them by path would need every parent to be
// searchable by the sandbox's host uid. Only the state dir is reached by
// path, so StateDir's parents must be searchable (New checks).
type launch struct {
	agentPath  string
	childFiles []*os.File // ExtraFiles: childFiles[i] is the agent's fd 3+i
	conn       net.Conn   // the worker's end of the stream
	init       *agent.Init
}

func (s *Sandbox) prepareLaunch() (l *launch, err error) {
	l = &launch{}
	defer func() {
		if err != nil {
			l.closeChildFiles()
			if l.conn != nil {
				_ = l.conn.Close()
			}
		}
	}()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent socketpair: %w", err)
	}
	l.childFiles = append(l.childFiles, os.NewFile(uintptr(fds[1]), "agent-stream"))
	ours := os.NewFile(uintptr(fds[0]), "agent-stream")
	l.conn, err = net.FileConn(ours)
	_ = ours.Close()
	if err != nil {
		return nil, fmt.Errorf("agent stream: %w", err)
	}
	if l.agentPath, err = l.open(s.rt.cfg.AgentPath, false); err != nil {
		return nil, fmt.Errorf("open agent: %w", err)
	}
	spec := s.spec
	init := &agent.Init{StateDir: s.stateDir, Workspace: spec.Workspace, Hostname: spec.Hostname, DNS: spec.DNS}
	if init.WorkspaceSource, err = l.cloneMount(spec.WorkspaceHost); err != nil {
		return nil, fmt.Errorf("clone workspace mount: %w", err)
	}
	if spec.HelmrHost != "" {
		if init.HelmrSource, err = l.cloneMount(spec.HelmrHost); err != nil {
			return nil, fmt.Errorf("clone helmr mount: %w", err)
		}
	}
	for _, layer := range spec.RootLayers {
		p, err := l.cloneMount(layer)
		if err != nil {
			return nil, fmt.Errorf("open root layer: %w", err)
		}
		init.RootLayers = append(init.RootLayers, p)
	}
	for i := 1; i < len(l.childFiles); i++ {
		init.CloseFDs = append(init.CloseFDs, 3+i)
	}
	l.init = init
	return l, nil
}

// open adds an O_PATH descriptor for path and returns its /proc/self/fd
// name in the agent.
func (l *launch) open(path string, dir bool) (string, error) {
	flags := unix.O_PATH | unix.O_CLOEXEC
	if dir {
		flags |= unix.O_DIRECTORY
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return "", err
	}
	l.childFiles = append(l.childFiles, f)
	return "/proc/self/fd/" + strconv.Itoa(2+len(l.childFiles)), nil
}

// cloneMount adds a detached recursive bind of dir and returns its "fd:N"
// name in the agent.
func (l *launch) cloneMount(dir string) (string, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return "", fmt.Errorf("open_tree %s: %w", dir, err)
	}
	l.childFiles = append(l.childFiles, os.NewFile(uintptr(fd), dir))
	return "fd:" + strconv.Itoa(2+len(l.childFiles)), nil
}

// closeChildFiles closes the worker's copies of the agent's descriptors.
func (l *launch) closeChildFiles() {
	for _, f := range l.childFiles {
		_ = f.Close()
	}
	l.childFiles = nil
}
