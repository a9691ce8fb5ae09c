package runs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workers"
	"github.com/helmr/helmr/internal/workspaces"
)

// A workspace's files are on the host of the worker that used it last, so
// its runs and direct operations go to a worker of that host (Needs.Host).
// When no worker of that host is live any more (none reported within
// WorkerTTL) and the workspace has a snapshot, the host requirement is
// dropped: any worker may take the run, and restores the snapshot before
// it starts (package worker); the workspace's host is then that worker's.

// movable reports whether a run or operation of ws that needs host may go
// to any worker: host has no live worker, and the workspace can follow
// (a snapshot, or the run is parked and its checkpoint holds the
// workspace). Without either, the files are only on host: the run waits
// for it.
func movable(ws workspaces.Workspace, host string, live map[string]bool, parked bool) bool {
	return host != "" && !live[host] && (ws.Snapshot != nil || parked)
}

// liveHosts returns the hosts of the workers seen within WorkerTTL.
func (s *Service) liveHosts(ctx context.Context) (map[string]bool, error) {
	ws, err := s.workers.ListWorkers(ctx, s.now().Add(-s.WorkerTTL))
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, w := range ws {
		if w.Capabilities.Host != "" {
			live[w.Capabilities.Host] = true
		}
	}
	return live, nil
}

// liveHostsAge is how old the live hosts PlaceWorkspace goes by may be:
// every direct operation asks, and a host counts as gone only after
// WorkerTTL (a minute) anyway.
const liveHostsAge = time.Second

// recentLiveHosts returns liveHosts as read at most liveHostsAge ago.
func (s *Service) recentLiveHosts(ctx context.Context) (map[string]bool, error) {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	if now := s.now(); s.live != nil && now.Sub(s.liveAt) >= 0 && now.Sub(s.liveAt) < liveHostsAge {
		return s.live, nil
	}
	live, err := s.liveHosts(ctx)
	if err != nil {
		return nil, err
	}
	s.live, s.liveAt = live, s.now()
	return live, nil
}

// WorkerHost returns the host worker id last reported (live or not: a
// stopping worker still saves the workspaces it holds); errdefs.ErrNotFound if it
// never reported one.
func (s *Service) WorkerHost(ctx context.Context, id string) (string, error) {
	ws, err := s.workers.ListWorkers(ctx, time.Time{})
	if err != nil {
		return "", err
	}
	for _, w := range ws {
		if w.ID == id && w.Capabilities.Host != "" {
			return w.Capabilities.Host, nil
		}
	}
	return "", fmt.Errorf("worker %s never reported a host: %w", id, errdefs.ErrNotFound)
}

// PlaceWorkspace returns the host a new run or direct operation of ws
// needs: ws.Host, or "" (any worker) when the workspace moves, with the
// reason as note.
func (s *Service) PlaceWorkspace(ctx context.Context, ws workspaces.Workspace) (host string, note *SystemData, err error) {
	if ws.Host == "" || ws.Snapshot == nil {
		return ws.Host, nil, nil // nothing to move, or nothing to move it with
	}
	live, err := s.recentLiveHosts(ctx)
	if err != nil {
		return "", nil, err
	}
	if !movable(ws, ws.Host, live, false) {
		return ws.Host, nil, nil
	}
	return "", s.moveNote(ws, ws.Host, false), nil
}

// LiveHosts returns the hosts of the live workers (seen within
// WorkerTTL) for which unfit says "": prefer first if it is one, then the
// most recently seen; when none fits, errdefs.ErrUnavailable with each
// live worker's reason.
func (s *Service) LiveHosts(ctx context.Context, prefer string, unfit func(workers.Capabilities) string) ([]string, error) {
	ws, err := s.workers.ListWorkers(ctx, s.now().Add(-s.WorkerTTL))
	if err != nil {
		return nil, err
	}
	sort.SliceStable(ws, func(i, j int) bool {
		if pi, pj := ws[i].Capabilities.Host == prefer, ws[j].Capabilities.Host == prefer; pi != pj {
			return pi
		}
		return ws[i].LastSeen.After(ws[j].LastSeen)
	})
	var hosts, why []string
	for _, w := range ws {
		if w.Capabilities.Host == "" || slices.Contains(hosts, w.Capabilities.Host) {
			continue
		}
		if reason := unfit(w.Capabilities); reason != "" {
			why = append(why, fmt.Sprintf("worker %s: %s", w.ID, reason))
			continue
		}
		hosts = append(hosts, w.Capabilities.Host)
	}
	switch {
	case len(hosts) > 0:
		return hosts, nil
	case len(why) == 0:
		return nil, errdefs.Unavailablef("no worker is live (none reported within %s)", s.WorkerTTL)
	}
	return nil, errdefs.Unavailablef("no live worker can take it: %s", strings.Join(why, "; "))
}

// OperationHost is the host a direct operation on ws goes to (see
// PlaceWorkspace), for the workspaces service.
func (s *Service) OperationHost(ctx context.Context, ws workspaces.Workspace) (string, error) {
	host, _, err := s.PlaceWorkspace(ctx, ws)
	return host, err
}

func (s *Service) moveNote(ws workspaces.Workspace, host string, parked bool) *SystemData {
	from := "its checkpoint"
	attrs := map[string]string{"workspace": ws.ID, "fromHost": host}
	if !parked {
		from = fmt.Sprintf("snapshot %d (%d bytes sealed, %s; what was written on that host after it is lost)", ws.Snapshot.Seq, ws.Snapshot.Size, ws.Snapshot.CreatedAt.Format("2006-01-02 15:04:05Z07:00"))
		attrs["snapshot"] = fmt.Sprint(ws.Snapshot.Seq)
	}
	return &SystemData{
		Message: fmt.Sprintf("workspace %s moves: no worker of its host %s has reported within %s, so any worker may take this run; it restores the workspace from %s",
			ws.ID, host, s.WorkerTTL, from),
		Attrs: attrs,
	}
}

// MoveStrandedRuns drops the host requirement of the QUEUED runs whose
// host has no live worker and whose workspace can move (see movable),
// and returns how many it freed.
func (s *Service) MoveStrandedRuns(ctx context.Context) (int, error) {
	if s.Workspaces == nil {
		return 0, nil
	}
	live, err := s.liveHosts(ctx)
	if err != nil {
		return 0, err
	}
	n, cursor := 0, ""
	for {
		page, err := s.store.ListRuns(ctx, Filter{Status: StatusQueued, Limit: 500, Cursor: cursor})
		if err != nil {
			return n, err
		}
		for _, r := range page.Runs {
			host := r.Needs.Host
			if host == "" || live[host] || r.WorkspaceID == "" {
				continue
			}
			ws, err := s.Workspaces.GetWorkspace(ctx, r.WorkspaceID)
			if err != nil {
				s.log.Warn("look up a stranded run's workspace", "run_id", r.ID, "workspace_id", r.WorkspaceID, "err", err)
				continue
			}
			// A queued run with a checkpoint (parked, or restored and
			// retried after its worker was lost) restores it, workspace
			// and all.
			parked := s.lastCheckpoint(ctx, r.ID) != nil
			if !movable(ws, host, live, parked) {
				continue
			}
			if err := s.store.DropRunHost(ctx, r.ID, host); err != nil {
				if !errors.Is(err, errdefs.ErrConflict) {
					return n, err
				}
				continue // leased or changed meanwhile
			}
			if err := s.Note(ctx, r.ID, *s.moveNote(ws, host, parked)); err != nil {
				s.log.Warn("note a moved run", "run_id", r.ID, "err", err)
			}
			n++
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if n > 0 {
		s.broker.PublishQueue()
	}
	return n, nil
}
