package walq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/walq/walq/wal"
)

// Random operations with the wall clock stepped both ways, and an injected
// failure of a write or an fsync at a random moment (the file-system seam
// is not reachable from package fuzz, so this lives here). Once the failure
// has happened, every call returns ErrFailed, a Get that was blocked
// returns it within a bound, and a reopen finds what the calls reported
// done: every item whose put returned nil is stored or was acked (the ack
// returned nil, or failed and may have landed), no item acked is stored,
// and every stored item was put by some call.
//
// A build with the tag long runs all 30 seeds; the default run 15 of them,
// the first and the last among them (sampled).
func TestFailureOps(t *testing.T) {
	// The operations of the log: its writes and fsyncs, before the write or
	// fsync and in it. Those of compaction fail only the compaction, and
	// those of a segment roll only put the roll off (TestRollFailure...
	// in package wal): the fault is armed again after each.
	ops := []string{"write", "sync", "file.sync"}
	run := sampled(t, 30, 15)
	for seed := range uint64(30) {
		if !run[seed] {
			continue
		}
		failOp := ops[seed%uint64(len(ops))]
		t.Run(fmt.Sprintf("seed%d-%s", seed, failOp), func(t *testing.T) {
			runFailureOps(t, seed, failOp)
		})
	}
}

// FuzzFailureOps is TestFailureOps with the seed and the failing operation
// chosen by the fuzzer.
func FuzzFailureOps(f *testing.F) {
	ops := []string{"write", "sync", "file.sync"}
	for seed := range uint64(6) {
		f.Add(seed, uint8(seed))
	}
	f.Fuzz(func(t *testing.T, seed uint64, op uint8) {
		runFailureOps(t, seed, ops[int(op)%len(ops)])
	})
}

func runFailureOps(t *testing.T, seed uint64, failOp string) {
	rng := rand.New(rand.NewPCG(seed, 0xfa11))
	dir := t.TempDir()
	clock := NewManualClock(epoch)
	// The reopen is in this process: the fsyncs are skipped (noSyncFS),
	// and FaultFS still counts and fails them.
	ffs := wal.NewFaultFS(noSyncOS(), 0)
	opts := Options{Clock: clock, Visibility: 10 * time.Second, Backoff: func(int) time.Duration { return time.Second },
		SegmentSize: 4096, DisableAutoCompact: true, fs: noSyncOS()}
	q, err := Open(dir, withFS(opts, ffs))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { q.Close() }()

	ctx := context.Background()
	stored := make(map[uint64][]byte) // put returned nil
	acked := make(map[uint64]bool)    // ack returned nil
	ackMaybe := make(map[uint64]bool) // ack returned ErrFailed: its outcome is unknown
	attempted := make(map[string]bool)
	var leases []Message
	failAt := 5 + rng.IntN(40)
	failed := false
	compactionHits, rollHits := 0, 0
	var rolls uint64 // the log's roll failures seen
	var blocked chan error
	for step := range failAt + 20 {
		if step == failAt {
			// A Get blocked on an empty queue, then the failure.
			bq := q
			blocked = make(chan error, 1)
			go func() {
				gctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				for {
					// A ready item is leased and stays so (stored, for the
					// check after the reopen); the failure comes to a later Get.
					if _, err := bq.Get(gctx); err != nil {
						blocked <- err
						return
					}
				}
			}()
			ffs.FailNext(failOp)
		}
		if step%5 == 4 {
			d := time.Duration(1+rng.IntN(3600)) * time.Second
			if rng.IntN(2) == 0 {
				d = -d
			}
			clock.StepWall(d)
		}
		var err error
		switch r := rng.IntN(10); {
		case r < 4:
			// Bodies of some hundred bytes roll the 4 KiB segments often.
			body := fmt.Appendf(nil, "seed %d step %d %s", seed, step, bytes.Repeat([]byte{'.'}, rng.IntN(400)))
			attempted[string(body)] = true
			var id uint64
			// A deadline past any sum of the steps: a wall clock stepped
			// ahead across the reopen moves queue time on.
			id, err = q.Put(ctx, body, WithDeadline(clock.Now().Add(1000*time.Hour)))
			if err == nil {
				stored[id] = body
			}
		case r < 7:
			var m Message
			var ok bool
			m, ok, err = q.TryGet()
			if ok {
				leases = append(leases, m)
			}
		case r < 9 && len(leases) > 0:
			m := leases[0]
			leases = leases[1:]
			switch err = q.Ack(m.Receipt); {
			case err == nil:
				acked[m.ID] = true
			case errors.Is(err, ErrFailed):
				ackMaybe[m.ID] = true
			}
		default:
			err = q.Compact()
			if err != nil && !errors.Is(err, ErrFailed) && errors.Is(err, wal.ErrInjected) {
				// A failed snapshot is not a failed log: the queue goes on
				// (CompactionsFailed counts it). Arm the fault again.
				ffs.FailNext(failOp)
				compactionHits++
				err = nil
			}
		}
		if n := q.log.RollFailures(); n > rolls {
			// The fault put a segment roll off; the log goes on.
			rolls = n
			rollHits++
			ffs.FailNext(failOp)
		}
		switch {
		case err == nil && failed:
			t.Fatalf("step %d: a call succeeded after the queue failed", step)
		case errors.Is(err, ErrFailed):
			failed = true
		case err != nil && !errors.Is(err, ErrLeaseLost):
			t.Fatalf("step %d: %v", step, err)
		}
		if step >= failAt && !failed && ffs.Failed() {
			// The fault hit a call that reports no error of its own (the
			// timer's, or an fsync of a policy that does not wait): the next
			// call must see it.
			if err := q.Extend(q.receiptFor(1<<40), time.Second); errors.Is(err, ErrFailed) {
				failed = true
			}
		}
	}
	if !ffs.Failed() {
		t.Skipf("the %s fault never fired in %d steps", failOp, failAt+20)
	}
	if !failed && compactionHits+rollHits > 0 {
		t.Skipf("the %s fault hit only compaction (%d times) and segment rolls (%d times), which do not fail the queue", failOp, compactionHits, rollHits)
	}
	if !failed {
		t.Fatalf("the %s fault fired but no call returned ErrFailed", failOp)
	}
	for _, call := range []func() error{
		func() error { _, err := q.Put(ctx, []byte("late")); return err },
		func() error { _, _, err := q.TryGet(); return err },
		func() error { return q.Compact() },
		func() error { return q.Redrive(1) },
		func() error {
			return q.Work(ctx, 1, func(context.Context, Message) error { return nil }, WorkOptions{})
		},
	} {
		if err := call(); !errors.Is(err, ErrFailed) {
			t.Errorf("a call after the failure: %v, want ErrFailed", err)
		}
	}
	select {
	case err := <-blocked:
		if !errors.Is(err, ErrFailed) {
			t.Errorf("the blocked Get returned %v, want ErrFailed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a Get blocked at the failure did not return within 2s")
	}
	q.Close()

	q, err = Open(dir, opts)
	if err != nil {
		t.Fatalf("reopen after the failure: %v", err)
	}
	present := storedBodies(t, q)
	for id, body := range stored {
		got, ok := present[id]
		switch {
		case acked[id] && ok:
			t.Errorf("item %d: acked (reported done) but stored after the reopen", id)
		case !acked[id] && !ackMaybe[id] && !ok:
			t.Errorf("item %d: put (reported done), never acked, lost after the reopen", id)
		case ok && !bytes.Equal(got, body):
			t.Errorf("item %d: body %q, put %q", id, got, body)
		}
	}
	for id, body := range present {
		if !attempted[string(body)] {
			t.Errorf("item %d stored with body %q that no put carried", id, body)
		}
	}
}
