package schedules

import (
	"strings"
	"time"

	_ "time/tzdata" // zones for schedules on hosts without a zoneinfo database

	"github.com/robfig/cron/v3"

	"github.com/helmr/helmr/internal/errdefs"
)

// MaxCronLength bounds a cron expression.
const MaxCronLength = 256

// parser reads standard cron (minute hour day-of-month month day-of-week),
// an optional leading seconds field (six fields: "*/2 * * * * *" is every
// two seconds) and the descriptors @yearly, @monthly, @weekly, @daily and
// @hourly.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed cron expression in its time zone.
type Spec struct {
	sched cron.Schedule
	loc   *time.Location
}

// ParseSpec parses expr in the IANA time zone tz ("" is UTC). A bad
// expression or zone is errdefs.ErrInvalid, naming what is wrong.
func ParseSpec(expr, tz string) (Spec, error) {
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return Spec{}, errdefs.Invalidf("cron is empty")
	case len(expr) > MaxCronLength:
		return Spec{}, errdefs.Invalidf("cron is longer than %d characters", MaxCronLength)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return Spec{}, errdefs.Invalidf("cron %q names a time zone: give it as the timezone field instead", expr)
	case strings.HasPrefix(expr, "@every"):
		return Spec{}, errdefs.Invalidf("cron %q: @every is not supported: use a cron pattern (a leading seconds field is allowed, \"*/2 * * * * *\" is every 2 seconds)", expr)
	}
	loc, err := LoadZone(tz)
	if err != nil {
		return Spec{}, err
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return Spec{}, errdefs.Invalidf("cron %q: %v", expr, err)
	}
	spec := Spec{sched: s, loc: loc}
	if spec.Next(time.Now()).IsZero() {
		return Spec{}, errdefs.Invalidf("cron %q never fires", expr)
	}
	return spec, nil
}

// LoadZone loads an IANA time zone ("" is UTC); an unknown one is
// errdefs.ErrInvalid.
func LoadZone(tz string) (*time.Location, error) {
	if tz == "" || tz == "UTC" {
		return time.UTC, nil
	}
	if len(tz) > 64 || strings.HasPrefix(tz, "/") || strings.Contains(tz, "..") {
		return nil, errdefs.Invalidf("timezone %q is not an IANA time zone name", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, errdefs.Invalidf("timezone %q is not an IANA time zone name (such as \"Europe/Paris\")", tz)
	}
	return loc, nil
}

// Next returns the first tick strictly after t, in UTC; zero when the
// expression has no tick in the next five years.
func (s Spec) Next(t time.Time) time.Time {
	n := s.sched.Next(t.In(s.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// Latest returns the latest tick at or before now, searching from first (a
// tick at or before now, the schedule's stored next tick): the one tick a
// schedule fires after missing several. It searches back from now in
// doubling windows, so a long outage of a frequent schedule costs a few
// steps, not one per missed tick.
func (s Spec) Latest(first, now time.Time) time.Time {
	if !first.Before(now) {
		return first
	}
	from := first
	for d := time.Second; ; d *= 2 {
		start := now.Add(-d)
		if !start.After(first) {
			break
		}
		if n := s.Next(start); !n.IsZero() && !n.After(now) {
			from = n
			break
		}
	}
	latest := from
	for {
		n := s.Next(latest)
		if n.IsZero() || n.After(now) {
			return latest.UTC()
		}
		latest = n
	}
}

// Upcoming returns the n ticks after t.
func (s Spec) Upcoming(t time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for range n {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// describeTick formats a tick for idempotency keys and messages.
func describeTick(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
