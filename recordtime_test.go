package walq

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// tickingClock is a ManualClock that, once ticking, moves on by a
// millisecond at every monotonic reading: time passes between any two
// reads of one call, as on a real clock, but the same way every run. Its
// timers never fire, so the queue's timer loop does nothing by itself.
type tickingClock struct {
	*ManualClock
	ticking atomic.Bool
}

type idleTimer struct{ c chan time.Time }

func (t idleTimer) C() <-chan time.Time      { return t.c }
func (t idleTimer) Stop() bool               { return true }
func (t idleTimer) Reset(time.Duration) bool { return true }

func (c *tickingClock) NewTimer(time.Duration) Timer { return idleTimer{make(chan time.Time)} }

func (c *tickingClock) Monotonic() time.Duration {
	if c.ticking.Load() {
		c.ManualClock.Advance(time.Millisecond)
	}
	return c.ManualClock.Monotonic()
}

// TestLeaseNotBeforeDue: a Get reads its time, discards an item past its
// deadline (a record), then leases. The discard's record made ready what
// was due by the clock's later reading, so the Get leased an item before
// it was due at the Get's own time; the state refused the lease record
// and the queue failed (a crash soak's child, 344 µs early). A record now
// makes ready what is due at its own time.
func TestLeaseNotBeforeDue(t *testing.T) {
	ctx := context.Background()
	// The second item comes due k ms and a half after the clock stops
	// moving by itself: for some k, between the Get's reading and the
	// discard record's.
	for k := range 8 {
		clock := &tickingClock{ManualClock: NewManualClock(epoch)}
		q, _, _ := testQueue(t, Options{Clock: clock})
		if _, err := q.Put(ctx, []byte("expiring"), WithDeadline(clock.Now().Add(10*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
		delay := 20*time.Millisecond + time.Duration(k)*time.Millisecond + 500*time.Microsecond
		if _, err := q.Put(ctx, []byte("later"), WithDelay(delay)); err != nil {
			t.Fatal(err)
		}
		clock.Advance(20 * time.Millisecond) // the first is past its deadline
		clock.ticking.Store(true)
		_, _, err := q.TryGet()
		clock.ticking.Store(false)
		if err != nil {
			t.Fatalf("k=%d: TryGet: %v", k, err)
		}
		if st := q.Stats(); st.Discarded != 1 {
			t.Fatalf("k=%d: discarded %d, want 1", k, st.Discarded)
		}
		q.Close()
	}
}
