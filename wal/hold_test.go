package wal

import (
	"testing"
)

// TestHoldBatchesAppends: appends during a Hold do not wake the committer
// and are not written; the release hands them over as one batch, which
// the committer writes in one round. A Sync during a hold still writes
// what is pending, holds nest, and a release called twice counts once.
func TestHoldBatchesAppends(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, Options{Sync: SyncNever})
	defer l.Close()
	if err := appendAndWait(l); err != nil {
		t.Fatal(err)
	}
	wakes := l.Wakes()

	outer := l.Hold()
	inner := l.Hold()
	var last *Commit
	for i := 0; i < 100; i++ {
		_, last = l.Append(1, testBody(uint64(i)))
	}
	if n := len(l.kick); n != 0 {
		t.Fatalf("100 appends during a hold left %d kicks for the committer, want 0", n)
	}
	inner()
	inner() // a second call of the same release changes nothing
	if n := len(l.kick); n != 0 {
		t.Fatalf("the release of a nested hold kicked the committer (%d kicks) while the outer one holds", n)
	}
	select {
	case <-last.Done():
		t.Fatal("a held record was written before its hold was released")
	default:
	}
	if w := l.Wakes(); w != wakes {
		t.Fatalf("the committer woke %d times during the hold, want 0", w-wakes)
	}
	outer()
	if err := last.Wait(); err != nil {
		t.Fatal(err)
	}
	if w := l.Wakes(); w != wakes+1 {
		t.Fatalf("the committer woke %d times for the released batch, want 1", w-wakes)
	}
	if d := l.DurableLSN(); d != l.LastLSN() {
		t.Fatalf("after the release: durable %d, last %d", d, l.LastLSN())
	}

	// A Sync during a hold writes what is pending.
	release := l.Hold()
	defer release()
	lsn, c := l.Append(1, []byte("held, then synced"))
	if synced, err := l.Sync(); err != nil || synced < lsn {
		t.Fatalf("Sync during a hold: %d, %v; want at least %d", synced, err, lsn)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	recs, _ := reopen(t, dir, Options{Sync: SyncNever})
	if got, want := len(recs), 102; got != want {
		t.Fatalf("reopened: %d records, want %d", got, want)
	}
}
