package wal

import (
	"errors"
	"testing"
	"time"
)

// TestBarrier: a Barrier is done at once when every record is durable, and
// otherwise only when the last record appended before it is, whether that
// record is still pending or being written; a failed write fails it.
func TestBarrier(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncNever, SyncInterval(time.Hour)} {
		t.Run(policy.String(), func(t *testing.T) {
			gate := newGateFS(OSFS())
			l, _ := openLog(t, t.TempDir(), Options{Sync: policy, FS: gate})
			defer l.Close()
			if err := waitNow(l.Barrier()); err != nil {
				t.Fatalf("Barrier of an empty log: %v", err)
			}

			// The committer takes the first record's batch and blocks in
			// its write; a second record stays pending behind it.
			gate.arm()
			lsn1, c1 := l.Append(1, []byte("one"))
			<-gate.entered
			b1 := l.Barrier() // the batch being written
			lsn2, c2 := l.Append(1, []byte("two"))
			b2 := l.Barrier() // the pending batch
			for _, b := range []*Commit{b1, b2} {
				select {
				case <-b.Done():
					t.Fatalf("Barrier done while records %d and %d are not durable", lsn1, lsn2)
				default:
				}
			}
			gate.open()
			for i, c := range []*Commit{c1, b1, c2, b2} {
				if err := c.Wait(); err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
			}
			if d := l.DurableLSN(); d < lsn2 {
				t.Fatalf("Barrier done with DurableLSN %d, below %d", d, lsn2)
			}
			if b := l.Barrier(); b != durableCommit {
				t.Fatalf("Barrier with every record durable is not the done Commit")
			}
		})
	}
}

// TestBarrierFailedWrite: a Barrier over a record whose write fails
// returns the failure, as the record's own Commit does.
func TestBarrierFailedWrite(t *testing.T) {
	ffs := NewFaultFS(OSFS(), 0)
	gate := newGateFS(ffs)
	l, _ := openLog(t, t.TempDir(), Options{Sync: SyncAlways, FS: gate})
	defer l.Close()
	gate.arm()
	_, c := l.Append(1, []byte("one"))
	<-gate.entered
	b := l.Barrier()
	ffs.FailNext("write")
	gate.open()
	if err := c.Wait(); !errors.Is(err, ErrFailed) {
		t.Fatalf("the record's commit: %v, want ErrFailed", err)
	}
	if err := b.Wait(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Barrier over a failed write: %v, want ErrFailed", err)
	}
	if err := l.Barrier().Wait(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Barrier after the failure: %v, want ErrFailed", err)
	}
}

// waitNow is c's error if c is done, and an error saying it is not.
func waitNow(c *Commit) error {
	select {
	case <-c.Done():
		return c.err
	default:
		return errors.New("not done")
	}
}

// TestFsyncedLSN: under SyncNever a record is durable once written and
// fsynced only by a Sync; under SyncAlways both move together.
func TestFsyncedLSN(t *testing.T) {
	l, _ := openLog(t, t.TempDir(), Options{Sync: SyncNever})
	lsn, c := l.Append(1, []byte("x"))
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if l.DurableLSN() != lsn || l.FsyncedLSN() != 0 {
		t.Fatalf("SyncNever after a write: durable %d, fsynced %d; want %d, 0", l.DurableLSN(), l.FsyncedLSN(), lsn)
	}
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if l.FsyncedLSN() != lsn {
		t.Fatalf("after Sync: fsynced %d, want %d", l.FsyncedLSN(), lsn)
	}
	l.Close()

	a, _ := openLog(t, t.TempDir(), Options{Sync: SyncAlways})
	defer a.Close()
	lsn, c = a.Append(1, []byte("y"))
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if a.FsyncedLSN() != lsn || a.DurableLSN() != lsn {
		t.Fatalf("SyncAlways: durable %d, fsynced %d, want %d", a.DurableLSN(), a.FsyncedLSN(), lsn)
	}
}
