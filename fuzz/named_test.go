package fuzz

import (
	"fmt"
	"testing"
	"time"

	"github.com/walq/walq"
)

// TestReopenNamedQueue reopens a directory whose named queue was created in
// the log after the last snapshot (here: there is no snapshot), with and
// without a lease open in it. Open must recover (a lease open at the crash
// ends as expired) and the queue must be usable again under its name.
//
// It fails as of b1ca339: recoverQueue builds the queues' runtime (d.rts)
// from the snapshot's state before the log is replayed, so a queue created
// by a record after the snapshot has none. Expiring its open lease at Open
// dereferences the missing runtime (nil pointer in endRecordLocked), and
// without a lease open, OpenQueue of the queue does (nil pointer).
func TestReopenNamedQueue(t *testing.T) {
	for _, leaseOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("lease open %v", leaseOpen), func(t *testing.T) {
			dir := t.TempDir()
			clock := walq.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			opts := walq.Options{SegmentSize: 4096, Sync: walq.SyncNever, DisableAutoCompact: true, Clock: clock}
			q, err := walq.Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			jobs, err := q.OpenQueue("jobs", walq.QueueOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := jobs.Put(t.Context(), []byte("job")); err != nil {
				t.Fatal(err)
			}
			if leaseOpen {
				if _, ok, err := jobs.TryGet(); err != nil || !ok {
					t.Fatalf("TryGet: %v, %v", ok, err)
				}
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}

			q, err = openRecovering(t, dir, opts)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			jobs, err = reopenQueue(t, q, "jobs")
			if err != nil {
				// No Close: a panic may have left the queue's lock held.
				t.Fatalf("OpenQueue after reopen: %v", err)
			}
			defer q.Close()
			if n := jobs.Stats().Items; n != 1 {
				t.Fatalf("jobs holds %d items after reopen, want 1", n)
			}
			clock.Advance(time.Hour) // past the backoff of a lease expired at Open
			m, ok, err := jobs.TryGet()
			if err != nil || !ok || string(m.Body) != "job" {
				t.Fatalf("TryGet after reopen: %+v, %v, %v", m, ok, err)
			}
		})
	}
}

// openRecovering is walq.Open that turns a panic into an error.
func openRecovering(t *testing.T, dir string, opts walq.Options) (q *walq.Queue, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("Open panicked: %v", r)
		}
	}()
	return walq.Open(dir, opts)
}

// reopenQueue is OpenQueue that turns a panic into an error.
func reopenQueue(t *testing.T, q *walq.Queue, name string) (h *walq.Queue, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("OpenQueue panicked: %v", r)
		}
	}()
	return q.OpenQueue(name, walq.QueueOptions{})
}

// TestReopenNamedQueueSettings reopens a directory whose named queue is in
// the snapshot and had its settings changed by a record after it, with a
// lease open: the lease ends at Open under the settings in the log (here
// MaxAttempts 1: the item is dead-lettered), not under the snapshot's.
//
// It fails as of b1ca339, for the reason TestReopenNamedQueue does: the
// runtime of the queue is built from the snapshot's settings before the
// log is replayed.
func TestReopenNamedQueueSettings(t *testing.T) {
	dir := t.TempDir()
	clock := walq.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts := walq.Options{SegmentSize: 4096, Sync: walq.SyncNever, DisableAutoCompact: true, Clock: clock}
	q, err := walq.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.OpenQueue("jobs", walq.QueueOptions{MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	jobs, err := q.OpenQueue("jobs", walq.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := jobs.SetSettings(walq.QueueOptions{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Put(t.Context(), []byte("job")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := jobs.TryGet(); err != nil || !ok {
		t.Fatalf("TryGet: %v, %v", ok, err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	q, err = openRecovering(t, dir, opts)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer q.Close()
	infos, err := q.Queues()
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		if info.Name == "jobs" && (info.Options.MaxAttempts != 1 || info.Stats.Dead != 1 || info.Stats.Items != 1) {
			t.Fatalf("jobs after reopen: MaxAttempts %d, %d dead of %d items; want MaxAttempts 1 and its one item dead (one attempt of one)",
				info.Options.MaxAttempts, info.Stats.Dead, info.Stats.Items)
		}
	}
}
