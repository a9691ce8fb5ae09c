package workspaces

import "testing"

func TestParseQuota(t *testing.T) {
	for in, want := range map[string]int64{"8Mi": 8 << 20, "20Gi": 20 << 30, "16Ti": 16 << 40, "1G": 1e9, "8388608": 8 << 20, "500M": 500e6} {
		if got, err := ParseQuota(in); err != nil || got != want {
			t.Errorf("ParseQuota(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1Mi", "8388607", "17Ti", "16385Gi", "-1Gi", "1.5Gi", "2gb", "Gi", "999999999999999Ti", " 1Gi"} {
		if got, err := ParseQuota(in); err == nil {
			t.Errorf("ParseQuota(%q) = %d, want an error", in, got)
		}
	}
}
