package wal

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/walq/walq/internal/testrule"
)

// TestOpenFaultEveryStep fails each file operation of a recovery in turn —
// one that removes an interrupted segment creation and cuts a torn frame —
// and checks after each that a plain reopen still recovers exactly the same
// records: a failure may stop recovery anywhere, but never loses or invents
// a record.
func TestOpenFaultEveryStep(t *testing.T) {
	template, ll := baseLog(t, "never", testDir)
	tail := ll.tail()
	writeFileT(t, filepath.Join(template, segmentTmpName(ll.last+1)), []byte("half a header"))
	torn := newSealer(tail.Hdr).frame(ll.last+1, 2, ll.last)[:50]
	tailPath := filepath.Join(template, tail.Name)
	writeFileT(t, tailPath, append(readFileT(t, tailPath), torn...))

	for n := 1; n < 10000; n++ {
		dir := copyDir(t, template)
		ffs := NewFaultFS(OSFS(), n)
		var r replayed
		l, info, err := Open(dir, withDir(Options{FS: ffs}), 0, r.apply)
		if !ffs.Failed() {
			if err != nil {
				t.Fatalf("no fault injected, open failed: %v", err)
			}
			checkRecords(t, r.recs, 1, ll.last)
			if info.CutBytes != int64(len(torn)) || len(info.LeftoversCleaned) != 1 || info.BrokenFile == "" {
				t.Fatalf("info %+v", info)
			}
			l.Close()
			t.Logf("recovery ran %d file operations", n-1)
			return
		}
		if err == nil {
			// The failed operation did not matter to the outcome (an fsync
			// before a read, a cache drop, the .broken copy); the log must
			// still work.
			checkRecords(t, r.recs, 1, ll.last)
			if lsn, c := l.Append(1, testBody(ll.last+1)); lsn != ll.last+1 || c.Wait() != nil {
				t.Fatalf("op %d: append after open", n)
			}
			if err := l.Close(); err != nil {
				t.Fatalf("op %d: close: %v", n, err)
			}
			recs, _ := reopen(t, dir, Options{})
			checkRecords(t, recs, 1, ll.last+1)
			continue
		}
		if !errors.Is(err, ErrInjected) {
			t.Fatalf("op %d: error %v does not wrap the injected fault", n, err)
		}
		recs, info := reopen(t, dir, Options{})
		checkRecords(t, recs, 1, ll.last)
		if info.First != 1 {
			t.Fatalf("op %d: first %d", n, info.First)
		}
	}
	t.Fatal("recovery never finished without a fault")
}

// TestWriteFaultEveryStep fails each file operation of a short life of a
// log in turn (open, appends that roll segments, a TruncateFront, a Sync,
// close), under each policy. Every record whose Commit succeeded must be
// there after a clean reopen, in order, and once a Commit failed every
// later one must fail too.
func TestWriteFaultEveryStep(t *testing.T) {
	const records = 12
	for _, policy := range []SyncPolicy{SyncAlways, SyncNever} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			opts := Options{SegmentSize: 200, Sync: policy}
			// The default run faults every step of the first 20 and every
			// eighth after (a log's life runs a few hundred); the long tests
			// fault every step.
			stride := 8
			if testrule.Long {
				stride = 1
			}
			for n := 1; n < 10000; n++ {
				if n > 20 && n%stride != 0 {
					continue
				}
				dir := t.TempDir()
				ffs := NewFaultFS(OSFS(), n)
				opts.FS = ffs
				l, _, err := Open(dir, withDir(opts), 0, nil)
				if err != nil {
					if !errors.Is(err, ErrInjected) {
						t.Fatalf("op %d: open: %v", n, err)
					}
					reopen(t, dir, opts) // a failed first open leaves a usable directory
					continue
				}
				var acked uint64
				var failed error
				for i := 1; i <= records; i++ {
					lsn, c := l.Append(1, testBody(uint64(i)))
					err := c.Wait()
					switch {
					case err == nil && failed != nil:
						t.Fatalf("op %d: record %d committed after a failure", n, i)
					case err == nil:
						acked = lsn
					case !errors.Is(err, ErrFailed) || !errors.Is(err, ErrInjected):
						t.Fatalf("op %d: record %d: %v", n, i, err)
					default:
						failed = err
					}
					if i == records/2 && failed == nil {
						segs := l.Segments()
						if len(segs) < 2 {
							if segs == nil && ffs.Failed() {
								continue // the fault was the listing's
							}
							t.Fatalf("op %d: no roll yet", n)
						}
						err := l.TruncateFront(segs[len(segs)-1].First)
						switch {
						case errors.Is(err, ErrFailed):
							failed = err
						case err != nil && l.Err() != nil:
							t.Fatalf("op %d: truncate front failed the log (%v) but said nothing changed: %v", n, l.Err(), err)
						}
					}
					if i == records-2 && failed == nil {
						if _, err := l.Sync(); err != nil {
							failed = err
						}
					}
				}
				closeErr := l.Close()
				if failed != nil && closeErr == nil {
					t.Fatalf("op %d: close succeeded after failure %v", n, failed)
				}
				if !ffs.Failed() {
					if closeErr != nil || acked != records {
						t.Fatalf("no fault: close %v, acked %d", closeErr, acked)
					}
					t.Logf("a log's life ran %d file operations", n-1)
					return
				}
				recs, info := reopen(t, dir, opts)
				if info.Last < acked {
					t.Fatalf("op %d: reopened with last %d, but %d was acknowledged", n, info.Last, acked)
				}
				checkRecords(t, recs, info.First, info.Last)
			}
			t.Fatal("never ran without a fault")
		})
	}
}
