//go:build long

package wal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// TestReadAtRacesMoveFront: readers read every record's body while the
// Log moves its front segments into the keep directory and removes some of
// them from there: a read of a moved segment always returns the body
// (under the log's name or the kept one: the move links before it
// unlinks), a read of a removed kept segment ErrBodyGone, never wrong
// bytes; a reopened Log and a standalone reader find the kept segments.
func TestReadAtRacesMoveFront(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(filepath.Dir(dir), filepath.Base(dir)+"-bodies")
	pl := newPlacements()
	opts := Options{SegmentSize: 1024, Sync: SyncNever, OnWritten: pl.record, MaxOpenSegments: 3, KeepDir: keep}
	l, _ := openLog(t, dir, opts)
	var written, moved, dropped atomic.Uint64 // dropped: kept segments below it were removed
	done := make(chan struct{})
	var werr error
	go func() {
		defer close(done)
		for i := 1; i <= 2000; i++ {
			_, c := l.Append(1, variedBody(uint64(i)))
			if i%8 == 0 {
				if werr = c.Wait(); werr != nil {
					return
				}
				written.Store(uint64(i))
			}
			if i%100 == 0 && i > 300 {
				index := uint64(i - 200)
				if werr = l.MoveFront(index); werr != nil {
					return
				}
				moved.Store(index)
			}
			if i%400 == 0 && i > 800 {
				kept, err := l.Kept()
				if err != nil || len(kept) < 2 {
					werr = fmt.Errorf("kept %v, %v", kept, err)
					return
				}
				dropped.Store(kept[0].Last + 1) // set before: a read may fail from now on
				if werr = l.RemoveKept(kept[0].First); werr != nil {
					return
				}
			}
		}
	}()
	var ok, gone atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				w := written.Load()
				if w == 0 {
					continue
				}
				lsn := 1 + uint64(rand.Int64N(int64(w)))
				if d := dropped.Load(); d > 60 && rand.IntN(2) == 0 {
					lsn = min(w, d-50+uint64(rand.IntN(150))) // near the last kept segment removed
				}
				p, found := pl.get(lsn)
				if !found {
					t.Errorf("record %d below %d written was not reported", lsn, w)
					return
				}
				lo := dropped.Load()
				err := readBody(l.ReadAt, p, lsn)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrBodyGone) && lsn < max(lo, dropped.Load()):
					gone.Add(1)
				default:
					t.Errorf("read of record %d (moved below %d, dropped below %d): %v", lsn, moved.Load(), dropped.Load(), err)
					return
				}
			}
		})
	}
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if ok.Load() == 0 || gone.Load() == 0 || moved.Load() == 0 {
		t.Fatalf("%d reads returned the body, %d found it gone, moved below %d: the race was not exercised", ok.Load(), gone.Load(), moved.Load())
	}
	t.Logf("%d reads returned the body, %d found it gone", ok.Load(), gone.Load())

	// Reopened, and read without a Log: every record not dropped is there.
	l, _ = openLog(t, dir, opts)
	r := NewBodyReader(OSFS(), dir, 2)
	r.SetKeepDir(keep)
	for lsn := dropped.Load(); lsn <= written.Load(); lsn++ {
		p, _ := pl.get(lsn)
		if err := readBody(l.ReadAt, p, lsn); err != nil {
			t.Fatalf("reopened log, record %d: %v", lsn, err)
		}
		if err := readBody(r.ReadAt, p, lsn); err != nil {
			t.Fatalf("standalone reader, record %d: %v", lsn, err)
		}
	}
	r.Close()
	l.Close()
}
