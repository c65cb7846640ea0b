package wal

import (
	"fmt"
	"strings"
	"testing"
)

// TestDamagedFrameStatesItsOwnWatermark: under SyncAlways record 44 was
// fsynced and its Commit released; then its frame is lost from the middle
// of the tail (an LSN gap), so the frame of 45, whose header verifies but
// whose LSN is wrong, is the damaged frame and the last one. Its header is
// the only statement that 44 was fsynced. Open once looked for watermarks
// from the byte after the damaged frame's start, never read that header,
// and cut 44 and 45 as if torn: a promised record lost without a word.
func TestDamagedFrameStatesItsOwnWatermark(t *testing.T) {
	dir, ll := baseLog(t, "always", testDir)
	f := ll.frameOf(baseLast - 1)
	path := ll.path(f.Seg)
	data := readFileT(t, path)
	writeFileT(t, path, append(data[:f.Off:f.Off], data[f.End():]...))
	before := dirContents(t, dir)

	l, info, err := Open(dir, withDir(Options{}), 0, nil)
	if err == nil {
		l.Close()
		t.Fatalf("opened, cutting %+v: the promised record %d is gone", info.Cut, baseLast-1)
	}
	ce := asCorruption(t, "open", err)
	want := fmt.Sprintf("lsn gap: want %d, got %d; the frame at offset %d states records up to %d were fsynced",
		baseLast-1, baseLast, f.Off, baseLast-1)
	if ce.Index != baseLast-1 || ce.Offset != f.Off || !strings.Contains(ce.Err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
	if d := diffContents(before, dirContents(t, dir)); d != "" {
		t.Fatalf("a refused open changed the directory: %s", d)
	}

	// The damaged frame's own watermark is a statement, not a later frame.
	hdr := ll.tail().Hdr
	w, err := walkFrames(readFileT(t, path), hdr, nil)
	if err != nil || w.bad == nil {
		t.Fatal(w, err)
	}
	v := judgeDamage(readFileT(t, path), hdr, w, ll.tail().First-1)
	if v.cut || v.watermark != baseLast-1 || v.statedAt != f.Off || v.later != 0 || v.laterAt != -1 {
		t.Fatalf("verdict %+v", v)
	}
}
