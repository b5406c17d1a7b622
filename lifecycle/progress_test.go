package lifecycle

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestEventLogReplaysToEverySubscriber(t *testing.T) {
	l := newEventLog()
	l.append(Event{Message: "one"})
	var wg sync.WaitGroup
	got := make([][]string, 3)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = l.follow(context.Background(), func(e Event) error {
				got[i] = append(got[i], e.Message)
				return nil
			})
		}()
	}
	time.Sleep(10 * time.Millisecond)
	l.append(Event{Message: "two"})
	l.append(Event{Message: "ready", Ready: true})
	l.append(Event{Message: "after the end"}) // ignored: the log is closed
	wg.Wait()
	for i, msgs := range got {
		if len(msgs) != 3 || msgs[0] != "one" || msgs[2] != "ready" {
			t.Errorf("subscriber %d got %v", i, msgs)
		}
	}
	// A late subscriber still gets the whole spawn.
	var late []string
	_ = l.follow(context.Background(), func(e Event) error { late = append(late, e.Message); return nil })
	if len(late) != 3 {
		t.Errorf("late subscriber got %v", late)
	}
}

func TestEventLogFollowStopsWithContext(t *testing.T) {
	l := newEventLog()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := l.follow(ctx, func(Event) error { return nil }); err != context.DeadlineExceeded {
		t.Errorf("follow on an open log = %v, want deadline exceeded", err)
	}
}

func TestSlowMessage(t *testing.T) {
	got := slowMessage("waited {seconds} seconds, {seconds}!", 75*time.Second)
	if got != "waited 75 seconds, 75!" {
		t.Errorf("got %q", got)
	}
}
