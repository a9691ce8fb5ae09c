package sandbox

import (
	"testing"
)

func TestNormalizeRootSize(t *testing.T) {
	for _, c := range []struct {
		size, want int64
		ok         bool
	}{
		{0, DefaultRootSize, true},
		{MinRootSize, MinRootSize, true},
		{5 << 30, 5 << 30, true},
		{MinRootSize - 1, 0, false},
		{-1, 0, false},
	} {
		s := Spec{ID: "x", RootLayers: []string{t.TempDir()}, WorkspaceHost: t.TempDir(), RootSizeBytes: c.size}
		err := s.Normalize(1)
		if (err == nil) != c.ok || c.ok && s.RootSizeBytes != c.want {
			t.Errorf("Normalize(RootSizeBytes %d) = %v, size %d; want ok %v, size %d", c.size, err, s.RootSizeBytes, c.ok, c.want)
		}
	}
}
