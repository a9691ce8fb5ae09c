package swerex

import (
	"container/list"
	"sync"
	"time"
)

// SWE-ReX's client sends each request with an X-Request-ID and retries
// it with the same one after a failure it cannot tell from a lost
// answer; its server answers the retry of its last request with the
// answer it kept. Helmr keeps the answers of the requests that change
// something (a command, a write), bounded in bytes and age, so a retry
// neither runs a command twice nor grows the process without bound.
// Reads (is_alive, read_file) are not kept: running one again is
// harmless, and their answers are the large ones.

const (
	replayBytes = 32 << 20         // all kept answers together
	replayAge   = 10 * time.Minute // a client retries within seconds
	replayOne   = 4 << 20          // a larger answer is not kept
)

type reply struct {
	status int
	body   []byte
}

type replayEntry struct {
	key string
	rep reply
	at  time.Time
}

// replayCache keeps answers by key, least recently stored first out,
// within max bytes and age.
type replayCache struct {
	mu    sync.Mutex
	max   int
	age   time.Duration
	size  int
	order *list.List // of *replayEntry, oldest at the front
	byKey map[string]*list.Element
	now   func() time.Time
}

func newReplayCache(max int, age time.Duration) *replayCache {
	return &replayCache{max: max, age: age, order: list.New(), byKey: map[string]*list.Element{}, now: time.Now}
}

func (c *replayCache) get(key string) (reply, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire()
	e, ok := c.byKey[key]
	if !ok {
		return reply{}, false
	}
	return e.Value.(*replayEntry).rep, true
}

func (c *replayCache) put(key string, rep reply) {
	if len(rep.body) > replayOne || len(rep.body) > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		c.remove(e)
	}
	c.byKey[key] = c.order.PushBack(&replayEntry{key: key, rep: rep, at: c.now()})
	c.size += len(rep.body)
	for c.size > c.max {
		c.remove(c.order.Front())
	}
	c.expire()
}

// expire drops the entries older than age.
func (c *replayCache) expire() {
	for e := c.order.Front(); e != nil && c.now().Sub(e.Value.(*replayEntry).at) > c.age; e = c.order.Front() {
		c.remove(e)
	}
}

func (c *replayCache) remove(e *list.Element) {
	ent := c.order.Remove(e).(*replayEntry)
	delete(c.byKey, ent.key)
	c.size -= len(ent.rep.body)
}

// bytes is what the kept answers weigh.
func (c *replayCache) bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}
