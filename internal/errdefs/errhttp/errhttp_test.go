package errhttp

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/helmr/helmr/internal/errdefs"
)

// TestRoundTrip: every kind has a status of its own, and the status maps
// back to the kind.
func TestRoundTrip(t *testing.T) {
	seen := map[int]error{}
	for _, k := range errdefs.Kinds {
		status, code := Status(fmt.Errorf("context: %w", k))
		if status == http.StatusInternalServerError || code == "" {
			t.Errorf("Status(%v) = %d %q, want a status of its own", k, status, code)
		}
		if prev, ok := seen[status]; ok {
			t.Errorf("kinds %v and %v share status %d", prev, k, status)
		}
		seen[status] = k
		if got := Kind(status); got != k {
			t.Errorf("Kind(%d) = %v, want %v", status, got, k)
		}
	}
}

func TestNoKindIsInternal(t *testing.T) {
	if status, code := Status(io.EOF); status != http.StatusInternalServerError || code != "internal" {
		t.Errorf("Status(io.EOF) = %d %q, want 500 internal", status, code)
	}
	if k := Kind(http.StatusInternalServerError); k != nil {
		t.Errorf("Kind(500) = %v, want nil", k)
	}
}
