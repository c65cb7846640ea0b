package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq"
	"github.com/walq/walq/wal"
)

// TestVerifyAcceptsUndoneRemovals: a compaction whose directory fsync
// failed after its removals goes on (the queue keeps serving), and a crash
// then may bring back any of the segments it removed, all wholly before
// the newest snapshot's records. Recovery skips them and the next open
// removes them; verify must not call that corruption, nor a gap between
// them and the log that follows.
func TestVerifyAcceptsUndoneRemovals(t *testing.T) {
	dir := t.TempDir()
	clock := walq.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts := testOptions(clock)
	opts.SegmentSize = 4 << 10
	q, err := walq.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	body := []byte(strings.Repeat("b", 300))
	for range 100 {
		if _, err := q.Put(ctx, body); err != nil {
			t.Fatal(err)
		}
	}
	for {
		m, ok, err := q.TryGet()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if err := q.Ack(m.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Put(ctx, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	segs, _, err := wal.ListSegments(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 4 {
		t.Fatalf("%d segments", len(segs))
	}
	saved := make(map[string][]byte)
	for _, s := range segs[:3] {
		data, err := os.ReadFile(s.Path)
		if err != nil {
			t.Fatal(err)
		}
		saved[s.Path] = data
	}
	if err := q.Compact(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	// The first and third removals were undone by the crash, the second
	// was not: a gap among them, and between them and the log.
	for _, s := range []wal.Segment{segs[0], segs[2]} {
		if err := os.WriteFile(s.Path, saved[s.Path], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stdout, stderr, code := inspect("verify", dir)
	if code != 0 || !strings.Contains(stdout, "recovery does not read them") {
		t.Errorf("verify exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	q, err = walq.Open(dir, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if st := q.Stats(); st.Items != 1 {
		t.Errorf("%d items after the reopen, want 1", st.Items)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []wal.Segment{segs[0], segs[2]} {
		if _, err := os.Stat(s.Path); !os.IsNotExist(err) {
			t.Errorf("%s still there after the open: %v", s.Name, err)
		}
	}
}
