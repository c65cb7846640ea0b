package walq

import (
	"math"
	"testing"
	"time"
)

// checkWakeups checks the two invariants of the queue's wake-ups: no stuck
// consumer (a Get waits only while its queue has no more items to lease
// than Gets signalled for them), and no busy idle (the timer plans no
// wake-up in the past, which it would act on at once, forever).
func checkWakeups(t *testing.T, q *Queue) {
	t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.qt.now()
	if s := q.stuckLocked(now); s != "" {
		t.Fatalf("a consumer is stuck: %s", s)
	}
	if at := q.nextWakeLocked(); at != math.MaxInt64 && at <= now {
		t.Fatalf("the timer would wake %v ago: it would spin", time.Duration(now-at))
	}
}
