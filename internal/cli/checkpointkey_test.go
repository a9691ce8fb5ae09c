package cli

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/config"
	"github.com/helmr/helmr/internal/sandbox"
)

// parkingRuntime is a runtime that can checkpoint (its methods are never
// called here).
type parkingRuntime struct{ sandbox.Runtime }

func (parkingRuntime) Name() string { return "gvisor" }
func (parkingRuntime) Checkpoint(context.Context, sandbox.Sandbox, string) error {
	return nil
}
func (parkingRuntime) Restore(context.Context, sandbox.Spec, string) (sandbox.Sandbox, error) {
	return nil, nil
}

type plainRuntime struct{ sandbox.Runtime }

func (plainRuntime) Name() string { return "process" }

// TestCheckpointKey: a worker that parks needs a valid key (helmr worker
// refuses to start without one, naming the setting); helmr dev makes one;
// a worker that does not park needs none, but uses one it is given (to
// seal workspace snapshots).
func TestCheckpointKey(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	good := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cases := []struct {
		name    string
		rt      sandbox.Runtime
		key     string
		park    time.Duration
		dev     bool
		wantErr string // "" : a key (or, not parking, none)
		wantKey bool
	}{
		{"worker without a key", parkingRuntime{}, "", 30 * time.Second, false, "needs HELMR_CHECKPOINT_ENCRYPTION_KEY", false},
		{"short key", parkingRuntime{}, base64.StdEncoding.EncodeToString([]byte("short")), time.Second, false, "is 5 bytes, want 32", false},
		{"not base64", parkingRuntime{}, "%%%", time.Second, true, "not base64", false},
		{"worker with a key", parkingRuntime{}, good, time.Second, false, "", true},
		{"dev makes one", parkingRuntime{}, "", time.Second, true, "", true},
		{"not parking", parkingRuntime{}, "", 0, false, "", false},
		{"not parking, with a key", parkingRuntime{}, good, 0, false, "", true},
		{"tier that cannot checkpoint", plainRuntime{}, "", time.Second, false, "", false},
		{"tier that cannot checkpoint, with a key", plainRuntime{}, good, 0, false, "", true},
		{"tier that cannot checkpoint, with a bad key", plainRuntime{}, "%%%", 0, false, "not base64", false},
		{"dev on a tier that cannot checkpoint", plainRuntime{}, "", 0, true, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := cfg
			cfg.CheckpointKey, cfg.ParkAfter = c.key, c.park
			k, err := checkpointKey(cfg, c.dev, c.rt, log)
			switch {
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("checkpointKey() = %v, want an error containing %q", err, c.wantErr)
			case c.wantErr == "" && err != nil:
				t.Errorf("checkpointKey() = %v", err)
			case (k != nil) != c.wantKey:
				t.Errorf("checkpointKey() key = %v, want a key: %v", k != nil, c.wantKey)
			}
		})
	}
	if fi, err := os.Stat(filepath.Join(cfg.DataDir, "checkpoint.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("dev's checkpoint key file: %v %v, want mode 0600", fi, err)
	}
}
