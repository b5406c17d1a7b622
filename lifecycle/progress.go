package lifecycle

import (
	"context"
	"sync"
)

// Event is one spawn-progress message, in the shape KubeSpawner's progress()
// yields and the hub's progress stream relays.
type Event struct {
	Progress *int           `json:"progress,omitempty"`
	Message  string         `json:"message"`
	RawEvent map[string]any `json:"raw_event,omitempty"`
	Ready    bool           `json:"ready,omitempty"`
	Failed   bool           `json:"failed,omitempty"`
	URL      string         `json:"url,omitempty"`
}

// eventLog keeps a spawn's events so that every subscriber can replay them
// from the first one and then wait for more, without missing the last.
type eventLog struct {
	mu      sync.Mutex
	events  []Event
	closed  bool
	changed chan struct{} // closed and replaced on every append
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{})} }

func (l *eventLog) append(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.events = append(l.events, e)
	if e.Ready || e.Failed {
		l.closed = true
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// since returns the events from index i on, whether the log is complete, and
// a channel closed at the next change.
func (l *eventLog) since(i int) ([]Event, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	if i < len(l.events) {
		out = append(out, l.events[i:]...)
	}
	return out, l.closed, l.changed
}

// Follow calls fn for every event, from the first, until the spawn ends or ctx is done.
func (l *eventLog) follow(ctx context.Context, fn func(Event) error) error {
	next := 0
	for {
		evs, closed, changed := l.since(next)
		for _, e := range evs {
			if err := fn(e); err != nil {
				return err
			}
		}
		next += len(evs)
		if closed {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
