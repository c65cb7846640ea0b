package walq

import (
	"context"
	"testing"
	"time"

	"github.com/walq/walq/wal"
)

// TestWorkDatesLeaseOnQueueTime: Work counts a handler's first heartbeat
// from the lease's own start on the queue's clock, not from a wall-clock
// reading. The lease record waits 25 s of a 30 s visibility for the disk,
// and meanwhile the wall clock is set back an hour: the lease has 5 s
// left when Get returns. Dated by the wall clock it looked fresh, the
// first beat was planned 10 s out, and the lease ran out under the live
// handler; dated on the queue's clock the beat comes before the handler.
func TestWorkDatesLeaseOnQueueTime(t *testing.T) {
	ffs := wal.NewFaultFS(wal.OSFS(), 0)
	gate := &gateFS{FS: ffs, release: make(chan struct{})}
	q, clock, _ := testQueue(t, withFS(Options{Sync: SyncAlways, Visibility: 30 * time.Second}, gate))
	t.Cleanup(gate.open)
	mustPut(t, q, "a")

	gate.arm() // the lease record's write
	started := make(chan Receipt, 1)
	startWork(t, q, 1, func(ctx context.Context, m Message) error {
		select {
		case started <- m.Receipt:
		default: // a second run: the test has failed already
		}
		<-ctx.Done()
		return ctx.Err()
	}, WorkOptions{HeartbeatEvery: 10 * time.Second, DrainTimeout: -1})
	<-gate.entered
	clock.Advance(25 * time.Second)
	clock.StepWall(-time.Hour)
	gate.open()
	r := recv(t, "the handler to start", started)
	end, ok := leaseEnd(q, r)
	if !ok {
		t.Fatal("the lease ended before the handler started")
	}
	if left := end.Sub(time.Unix(0, q.qt.now())); left < 20*time.Second { // leaseEnd is in queue time
		t.Fatalf("the handler started with %v of its lease left: no beat came first", left)
	}
	clock.Advance(6 * time.Second) // past the lease's first end
	if st := q.Stats(); st.Expired != 0 || st.Leased != 1 {
		t.Fatalf("after the lease's first end: %+v", st)
	}
}
