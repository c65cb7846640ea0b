package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var testDir = DirID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

func openSmoke(t *testing.T, dir string, opts Options) (*Log, []Record, OpenInfo, error) {
	t.Helper()
	opts.Dir = testDir
	var recs []Record
	l, info, err := Open(dir, opts, 0, func(_ Position, r Record) error {
		r.Body = bytes.Clone(r.Body)
		recs = append(recs, r)
		return nil
	})
	return l, recs, info, err
}

func TestSmokeRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l, _, _, err := openSmoke(t, dir, Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	var last *Commit
	for i := 0; i < 500; i++ {
		_, last = l.Append(1, []byte(fmt.Sprintf("record %d", i)))
		if i%7 == 0 {
			last.Wait()
		}
	}
	if err := last.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, recs, info, err := openSmoke(t, dir, Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(recs) != 500 || info.Last != 500 || info.Segments < 3 {
		t.Fatalf("got %d records, info %+v", len(recs), info)
	}
	for i, r := range recs {
		if r.LSN != uint64(i+1) || string(r.Body) != fmt.Sprintf("record %d", i) {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	if err := l.TruncateFront(400); err != nil {
		t.Fatal(err)
	}
	if segs := l.Segments(); segs[0].First > 400 || len(segs) >= info.Segments {
		t.Fatalf("after truncate: %+v", segs)
	}
}

func lastSegment(t *testing.T, dir string) Segment {
	segs, _, err := ListSegments(dir)
	if err != nil || len(segs) == 0 {
		t.Fatal(segs, err)
	}
	return segs[len(segs)-1]
}

func TestSmokeWatermark(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNever, SyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			l, _, _, err := openSmoke(t, dir, Options{Sync: policy})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 20; i++ {
				_, c := l.Append(1, bytes.Repeat([]byte{byte(i)}, 100))
				c.Wait()
			}
			l.Close()
			seg := lastSegment(t, dir)
			data, _ := os.ReadFile(seg.Path)
			orig := bytes.Clone(data)
			// Damage the body of the 10th frame.
			off := SegmentHeaderSize + 9*(FrameHeaderSize+RecordHeaderSize+100) + FrameHeaderSize + RecordHeaderSize + 5
			data[off] ^= 1
			os.WriteFile(seg.Path, data, 0o600)
			l, recs, info, err := openSmoke(t, dir, Options{Sync: policy})
			if policy == SyncAlways {
				// Close fsynced all; SyncAlways: every frame after carries wm >= its LSN.
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("want corruption, got %v", err)
				}
				now, _ := os.ReadFile(seg.Path)
				if !bytes.Equal(now, data) {
					t.Fatal("refused open changed the segment")
				}
				return
			}
			// SyncNever: frames were never fsynced before Close, so wm = 0.
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if len(recs) != 9 || info.CutBytes == 0 || info.Cut.Later != 10 {
				t.Fatalf("recs %d info %+v cut %+v", len(recs), info, info.Cut)
			}
			_ = orig
			if _, err := os.Stat(filepath.Join(dir, info.BrokenFile)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
