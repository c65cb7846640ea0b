package wal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenFaultEveryStep fails each file operation of a recovery in turn —
// one that finishes an interrupted TruncateFront and cuts a torn tail — and
// checks after each that a plain reopen still recovers exactly the same
// records: a failure may stop recovery anywhere, but never loses or invents
// a record.
func TestOpenFaultEveryStep(t *testing.T) {
	template, ll := baseLog(t)
	truncatedAt := ll.segs[1].First + 2
	writeStartLeftover(t, ll, truncatedAt)
	writeFileT(t, filepath.Join(template, SegmentName(truncatedAt)+startSuffix+tempSuffix), []byte("x"))
	tailPath := filepath.Join(template, ll.tail().Name)
	writeFileT(t, tailPath, append(readFileT(t, tailPath), frame(1, ll.last+1, testBody(ll.last+1))[:7]...))
	opts := Options{SegmentSize: baseSegmentSize}

	for n := 1; n < 10000; n++ {
		dir := copyDir(t, template)
		ffs := NewFaultFS(OSFS(), n)
		opts.FS = ffs
		var r replayed
		l, info, err := Open(dir, opts, 0, r.apply)
		if !ffs.Failed() {
			if err != nil {
				t.Fatalf("no fault injected, open failed: %v", err)
			}
			checkRecords(t, r.recs, truncatedAt, ll.last)
			if info.CutBytes != 7 || len(info.LeftoversCleaned) == 0 {
				t.Fatalf("info %+v", info)
			}
			l.Close()
			t.Logf("recovery ran %d file operations", n-1)
			return
		}
		if err == nil {
			// The failed operation did not matter to the outcome (closing a
			// file that was only read); the log must still work.
			if lsn, c := l.Append(1, testBody(ll.last+1)); lsn != ll.last+1 || c.Wait() != nil {
				t.Fatalf("op %d: append after open", n)
			}
			if err := l.Close(); err != nil {
				t.Fatalf("op %d: close: %v", n, err)
			}
			recs, _ := reopen(t, dir, opts)
			checkRecords(t, recs, truncatedAt, ll.last+1)
			continue
		}
		if !errors.Is(err, ErrInjected) {
			t.Fatalf("op %d: error %v does not wrap the injected fault", n, err)
		}
		recs, info := reopen(t, dir, opts)
		checkRecords(t, recs, truncatedAt, ll.last)
		if info.First != truncatedAt {
			t.Fatalf("op %d: first %d", n, info.First)
		}
	}
	t.Fatal("recovery never finished without a fault")
}

// TestWriteFaultEveryStep fails each file operation of a short life of a
// log in turn (open, appends that roll segments, a TruncateFront, close).
// Every record whose Commit succeeded must be there after a clean reopen,
// in order, and once a Commit failed every later one must fail too.
func TestWriteFaultEveryStep(t *testing.T) {
	const records = 12
	opts := Options{SegmentSize: 96}
	for n := 1; n < 10000; n++ {
		dir := t.TempDir()
		ffs := NewFaultFS(OSFS(), n)
		opts.FS = ffs
		l, _, err := Open(dir, opts, 0, nil)
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
					t.Fatalf("op %d: no roll yet", n)
				}
				err := l.TruncateFront(segs[1].First - 1)
				switch {
				case errors.Is(err, ErrFailed):
					failed = err
				case err != nil && l.Err() != nil:
					t.Fatalf("op %d: truncate front failed the log (%v) but said nothing changed: %v", n, l.Err(), err)
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
}

// FuzzScanSegment scans arbitrary bytes as the only segment of a log: Scan
// must never panic, must never pass on a record that does not verify, and
// what it accepts must be a prefix of whole records.
func FuzzScanSegment(f *testing.F) {
	var seg []byte
	for lsn := uint64(1); lsn <= 4; lsn++ {
		seg = append(seg, frame(byte(lsn), lsn, testBody(lsn))...)
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-5])
	f.Add(append(bytes.Clone(seg), make([]byte, 40)...))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, SegmentName(1)), data, 0o600); err != nil {
			t.Fatal(err)
		}
		var end int64
		var count uint64
		res, err := Scan(dir, 0, 0, func(p Position, r Record) error {
			count++
			if r.LSN != count || p.Index != count || p.Offset != end {
				t.Fatalf("record %d at offset %d, want offset %d", r.LSN, p.Offset, end)
			}
			entry := AppendRecord(nil, r.Type, r.LSN, r.Body)
			if !bytes.Equal(frame(r.Type, r.LSN, r.Body), data[p.Offset:p.Offset+int64(len(entry)+uvarintLen(uint64(len(entry))))]) {
				t.Fatalf("record %d does not match its bytes", r.LSN)
			}
			end = p.Offset + int64(len(entry)+uvarintLen(uint64(len(entry))))
			return nil
		})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v", err)
			}
			return
		}
		switch {
		case res.Tail == nil && end != int64(len(data)):
			t.Fatalf("accepted %d of %d bytes without a tail", end, len(data))
		case res.Tail != nil && (res.Tail.Offset != end || res.Tail.Offset+res.Tail.Bytes != int64(len(data))):
			t.Fatalf("tail %+v after %d of %d bytes", res.Tail, end, len(data))
		}
	})
}
