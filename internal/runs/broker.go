package runs

import "sync"

// Broker notifies in-process listeners that a run's events changed or that
// work was queued. Notifications carry no data: listeners re-read the store,
// so a missed or coalesced signal loses nothing.
type Broker struct {
	mu    sync.Mutex
	subs  map[string]map[chan struct{}]struct{}
	queue map[chan struct{}]struct{}
}

// NewBroker returns an empty broker.
func NewBroker() *Broker {
	return &Broker{subs: map[string]map[chan struct{}]struct{}{}, queue: map[chan struct{}]struct{}{}}
}

// Subscribe returns a channel signalled when run id changes, and a func that
// ends the subscription.
func (b *Broker) Subscribe(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	if b.subs[id] == nil {
		b.subs[id] = map[chan struct{}]struct{}{}
	}
	b.subs[id][ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs[id], ch)
		if len(b.subs[id]) == 0 {
			delete(b.subs, id)
		}
		b.mu.Unlock()
	}
}

// Publish signals the subscribers of run id.
func (b *Broker) Publish(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs[id] {
		signal(ch)
	}
}

// SubscribeQueue returns a channel signalled when a run is queued.
func (b *Broker) SubscribeQueue() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	b.queue[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.queue, ch)
		b.mu.Unlock()
	}
}

// PublishQueue signals queue subscribers.
func (b *Broker) PublishQueue() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.queue {
		signal(ch)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
