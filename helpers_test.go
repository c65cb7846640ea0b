package walq

import (
	"github.com/walq/walq/state"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/walq/walq/wal"
)

// settle does at once what the timer loop does when the clock reaches a
// due time, so a test that advanced a ManualClock sees its effects without
// waiting for the loop's goroutine.
func (q *Queue) settle() { q.tick() }

// waitForWaiters returns once n Gets are blocked waiting for an item.
func (q *Queue) waitForWaiters(n int) {
	for {
		q.mu.Lock()
		got := q.rt.waiters.len()
		q.mu.Unlock()
		if got >= n {
			return
		}
		runtime.Gosched()
	}
}

// stateBytes is the canonical encoding of the queue's state: equal states
// give equal bytes.
func (q *Queue) stateBytes() []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.bodies.drainLocked(q.st)
	b, err := q.st.MarshalSnapshot()
	if err != nil {
		panic(err)
	}
	return b
}

// waitForTimerAt returns once the timer loop has planned to wake at or
// before at (it has seen the change that needs it), yielding meanwhile.
func (q *Queue) waitForTimerAt(at int64) {
	for {
		q.mu.Lock()
		planned := q.timerAt
		q.mu.Unlock()
		if planned <= at {
			runtime.Gosched()
			return
		}
		runtime.Gosched()
	}
}

// dirIDOf reads the directory ID from a queue directory's marker.
func dirIDOf(t testing.TB, dir string) wal.DirID {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "WALQ-FORMAT"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := wal.DecodeMarker(data)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// storedBodies reads the body of every stored item of every queue as a
// delivery would (from memory or from the log, checked by its CRC),
// without leasing anything.
func storedBodies(t testing.TB, q *Queue) map[uint64][]byte {
	t.Helper()
	var srcs []bodySource
	q.mu.Lock()
	q.bodies.drainLocked(q.st)
	q.st.Each(func(it *state.Item) { srcs = append(srcs, q.sourceLocked(it.ID, it.Body, false)) })
	q.mu.Unlock()
	out := make(map[uint64][]byte, len(srcs))
	for _, src := range srcs {
		b, err := q.loadBody(src)
		if err != nil {
			t.Fatalf("body of item %d: %v", src.id, err)
		}
		out[src.id] = b
	}
	return out
}
