package crashtest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/wal"
)

// TestFsyncedCountsATornFramesWatermark: a kill that cuts a large write
// short leaves the frame's authentic header, whose watermark says what was
// fsynced before it; the power loss must keep those records, as recovery
// refuses a log that lost them. (The harness once counted only whole
// frames, zeroed such records, and reported the refusal as a violation.)
func TestFsyncedCountsATornFramesWatermark(t *testing.T) {
	queueDir := t.TempDir()
	logDir := filepath.Join(queueDir, layout.LogDirName)
	l, _, err := wal.Open(logDir, wal.Options{Sync: wal.SyncAlways, Dir: wal.DirID{7}}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{[]byte("first"), []byte("second"), bytes.Repeat([]byte("x"), 64<<10)} {
		if _, c := l.Append(1, body); c.Wait() != nil {
			t.Fatal("append")
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _, err := wal.ListSegments(logDir)
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	seg, data, err := readSegmentFile(segs[0].Path)
	if err != nil || len(seg.frames) != 3 {
		t.Fatalf("%d frames, %v", len(seg.frames), err)
	}
	last := seg.frames[2]
	if last.watermark != 2 {
		t.Fatalf("the third frame's watermark is %d, want 2", last.watermark)
	}
	// The kill cut the third frame's write at a page.
	if err := os.WriteFile(segs[0].Path, data[:last.off+4096], 0o600); err != nil {
		t.Fatal(err)
	}
	h := &harness{queueDir: queueDir}
	p, err := h.fsynced(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if p.lsn != 2 {
		t.Fatalf("fsynced LSN %d (%s), want 2: the torn frame's header shows records 1 and 2 fsynced", p.lsn, p.why)
	}
	if keep, err := p.keepOffset(); err != nil || keep != seg.frames[1].end {
		t.Fatalf("keep %d, %v; want %d, the end of the frame holding record 2", keep, err, seg.frames[1].end)
	}
}
