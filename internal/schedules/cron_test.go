package schedules

import (
	"errors"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

func TestParseSpecNext(t *testing.T) {
	at := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC) // winter: Paris is UTC+1
	summer := time.Date(2026, 7, 15, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		cron, tz string
		from     time.Time
		want     time.Time
	}{
		{"*/2 * * * * *", "", at, at.Add(2 * time.Second)},
		{"0 * * * *", "UTC", at, at.Add(time.Hour)},
		{"0 9 * * *", "Europe/Paris", at, time.Date(2026, 1, 16, 8, 0, 0, 0, time.UTC)},
		{"0 9 * * *", "Europe/Paris", summer, time.Date(2026, 7, 16, 7, 0, 0, 0, time.UTC)},
		{"@daily", "America/New_York", at, time.Date(2026, 1, 16, 5, 0, 0, 0, time.UTC)},
	} {
		spec, err := ParseSpec(tt.cron, tt.tz)
		if err != nil {
			t.Errorf("ParseSpec(%q, %q): %v", tt.cron, tt.tz, err)
			continue
		}
		if got := spec.Next(tt.from); !got.Equal(tt.want) {
			t.Errorf("ParseSpec(%q, %q).Next(%v) = %v, want %v", tt.cron, tt.tz, tt.from, got, tt.want)
		}
	}
}

func TestParseSpecRefuses(t *testing.T) {
	for _, tt := range []struct{ cron, tz string }{
		{"", ""},
		{"* * *", ""},
		{"61 * * * *", ""},
		{"@every 2s", ""},
		{"CRON_TZ=UTC 0 * * * *", ""},
		{"0 0 30 2 *", ""}, // February 30th never comes
		{"0 * * * *", "Mars/Olympus"},
		{"0 * * * *", "../../etc/passwd"},
	} {
		if _, err := ParseSpec(tt.cron, tt.tz); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseSpec(%q, %q) error = %v, want ErrInvalid", tt.cron, tt.tz, err)
		}
	}
}

func TestLatest(t *testing.T) {
	spec, err := ParseSpec("*/2 * * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	first := time.Date(2026, 1, 15, 12, 0, 2, 0, time.UTC)
	for _, tt := range []struct {
		now, want time.Time
	}{
		{first, first},
		{first.Add(time.Second), first},
		{first.Add(3 * time.Second), first.Add(2 * time.Second)},
		{first.Add(30*24*time.Hour + time.Second), first.Add(30 * 24 * time.Hour)},
	} {
		if got := spec.Latest(first, tt.now); !got.Equal(tt.want) {
			t.Errorf("Latest(%v, %v) = %v, want %v", first, tt.now, got, tt.want)
		}
	}
}
