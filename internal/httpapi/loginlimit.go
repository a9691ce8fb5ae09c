package httpapi

import (
	"strconv"
	"sync"
	"time"
)

// Failed sign-ins are limited per client address: loginFailures within
// loginWindow block that address's sign-ins until the window ends. The
// count lives in this replica's memory (bounded by loginClients
// addresses): a modest brake on guessing, not an account lockout.
const (
	loginFailures = 10
	loginWindow   = 10 * time.Minute
	loginClients  = 4096
)

type loginLimiter struct {
	now func() time.Time

	mu      sync.Mutex
	clients map[string]loginCount
}

type loginCount struct {
	n     int
	since time.Time // the window's start
}

func newLoginLimiter() *loginLimiter {
	return &loginLimiter{now: time.Now, clients: map[string]loginCount{}}
}

// blocked returns how long client must wait before it may try again (0:
// it may now).
func (l *loginLimiter) blocked(client string) time.Duration {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.clients[client]
	if !ok {
		return 0
	}
	if end := c.since.Add(loginWindow); !now.Before(end) {
		delete(l.clients, client)
		return 0
	} else if c.n >= loginFailures {
		return end.Sub(now)
	}
	return 0
}

// failed counts a failed sign-in of client.
func (l *loginLimiter) failed(client string) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.clients[client]
	if !ok || !now.Before(c.since.Add(loginWindow)) {
		if len(l.clients) >= loginClients {
			l.pruneLocked(now)
		}
		c = loginCount{since: now}
	}
	c.n++
	l.clients[client] = c
}

// pruneLocked drops the windows that ended, and if none did, the oldest.
func (l *loginLimiter) pruneLocked(now time.Time) {
	var oldest string
	var at time.Time
	for k, c := range l.clients {
		if !now.Before(c.since.Add(loginWindow)) {
			delete(l.clients, k)
		} else if at.IsZero() || c.since.Before(at) {
			oldest, at = k, c.since
		}
	}
	if len(l.clients) >= loginClients {
		delete(l.clients, oldest)
	}
}

// retryAfter is d as a Retry-After header: whole seconds, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
