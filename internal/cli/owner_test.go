package cli

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/config"
)

func TestOwnerToken(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	if _, err := ownerToken(cfg, false, nil); err == nil || !strings.Contains(err.Error(), "HELMR_OWNER_TOKEN_FILE") {
		t.Errorf("ownerToken(server, none) = %v, want a refusal naming HELMR_OWNER_TOKEN_FILE", err)
	}
	cfg.OwnerToken = "admin"
	if _, err := ownerToken(cfg, false, nil); err == nil {
		t.Errorf("ownerToken(server, %q) = nil error, want a refusal", cfg.OwnerToken)
	}
	file := filepath.Join(t.TempDir(), "owner.token")
	os.WriteFile(file, []byte(strings.Repeat("k", 40)+"\n"), 0o600)
	cfg.OwnerToken, cfg.OwnerTokenFile = "", file
	if tok, err := ownerToken(cfg, false, nil); err != nil || tok != strings.Repeat("k", 40) {
		t.Errorf("ownerToken(server, file) = %q, %v", tok, err)
	}

	// helmr dev makes one at its first start and keeps it.
	cfg.OwnerTokenFile = ""
	first, err := ownerToken(cfg, true, discard())
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(cfg.DataDir, "owner.token"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("dev owner credential file: %v, %v; want mode 0600", st, err)
	}
	if again, err := ownerToken(cfg, true, discard()); err != nil || again != first {
		t.Errorf("second dev start = %q, %v; want the first credential %q", again, err, first)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
