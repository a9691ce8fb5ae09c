package httpapi

import (
	"fmt"
	"testing"
	"time"
)

// TestLoginLimiter: loginFailures failures block a client (and only it)
// until its window ends; the map of clients stays bounded.
func TestLoginLimiter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLoginLimiter()
	l.now = func() time.Time { return now }
	for i := range loginFailures {
		if d := l.blocked("a"); d != 0 {
			t.Fatalf("blocked(a) after %d failures = %v, want 0", i, d)
		}
		l.failed("a")
	}
	now = now.Add(time.Minute)
	if d := l.blocked("a"); d != loginWindow-time.Minute {
		t.Errorf("blocked(a) after %d failures = %v, want the rest of the window %v", loginFailures, d, loginWindow-time.Minute)
	}
	if d := l.blocked("b"); d != 0 {
		t.Errorf("blocked(b) = %v, want another client unaffected", d)
	}
	now = now.Add(loginWindow)
	if d := l.blocked("a"); d != 0 {
		t.Errorf("blocked(a) after the window = %v, want 0", d)
	}
	for i := range loginClients + 10 {
		l.failed(fmt.Sprint("c", i))
	}
	if n := len(l.clients); n > loginClients {
		t.Errorf("%d clients kept, want at most %d", n, loginClients)
	}
	if got := retryAfter(1500 * time.Millisecond); got != "2" {
		t.Errorf("retryAfter(1.5s) = %q, want 2", got)
	}
}
