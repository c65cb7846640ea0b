package walq

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// checkWakeups checks the invariants of the queue's wake-ups: no stuck
// consumer (a Get waits only while its queue has no more items to lease
// than Gets signalled for them), no busy idle (the timer plans no wake-up
// in the past, which it would act on at once, forever), and no queue later
// in the timer's order than its own time (the timer would sleep past it).
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
	if s := q.wakeOrderLocked(now); s != "" {
		t.Fatal(s)
	}
}

// wakeOrderLocked checks the timer's order of queues (wakes): a heap whose
// positions are right, holding every queue that has a time, none later
// than that time ("" means it holds).
func (q *Queue) wakeOrderLocked(now int64) string {
	for i, rt := range q.wakes {
		if rt.wakePos != i {
			return fmt.Sprintf("%s is at %d in the timer's order, which says %d", rt.label(), i, rt.wakePos)
		}
		if i > 0 && q.wakes[(i-1)/2].wakeAt > rt.wakeAt {
			return fmt.Sprintf("the timer's order is not a heap at %d", i)
		}
	}
	for _, rt := range q.rts {
		qs := q.st.Queue(rt.id)
		if qs == nil {
			continue
		}
		if at := q.queueWakeLocked(qs, rt, now); at < rt.wakeAt {
			return fmt.Sprintf("%s is due at %d, but the timer's order has it at %d", rt.label(), at, rt.wakeAt)
		}
	}
	return ""
}
