package walq

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq/wal"
)

// requiredSectionDir makes a directory whose log no longer reaches back to LSN 1
// (compactions removed the early segments) and whose newest snapshot then
// gains a section of kind k, as a newer walq would write it.
func requiredSectionDir(t *testing.T, k byte, logReaches bool) (string, string) {
	dir := filepath.Join(t.TempDir(), "q")
	clock := NewManualClock(fixtureTime)
	q, err := Open(dir, fixtureOptions(clock))
	must(t, err)
	if !logReaches {
		for i := 0; i < 400; i++ {
			mustPut(t, q, fmt.Sprintf("body %04d ....................................", i))
			m, ok, err := q.TryGet()
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			must(t, q.Ack(m.Receipt))
		}
	}
	mustPut(t, q, "keep me")
	must(t, q.Compact())
	must(t, q.Close())
	snaps, err := wal.ListSnapshots(dir)
	must(t, err)
	snap, err := wal.ReadSnapshot(snaps[0].Path)
	must(t, err)
	file := wal.EncodeSnapshotSections(snap.Dir, snap.LSN,
		wal.Section{Kind: snap.Kind, Data: snap.Body},
		wal.Section{Kind: k, Data: []byte{0x90}})
	must(t, os.WriteFile(snaps[0].Path, file, 0o600))
	segs, _ := os.ReadDir(filepath.Join(dir, "log"))
	t.Logf("snapshots %d, first segment %s", len(snaps), segs[0].Name())
	return dir, snaps[0].Name
}

// TestRequiredSnapshotSectionRefusedAsNewer: a snapshot with a required
// section this build does not know (kind 5, which format-next.md reserves)
// is refused with ErrNewerFormat and nothing changes, whether or not the
// log still reaches back past it (before, it was passed over as a bad
// snapshot: refused as damage when the log did not reach back, and
// opened without the section when it did).
func TestRequiredSnapshotSectionRefusedAsNewer(t *testing.T) {
	for _, reaches := range []bool{false, true} {
		t.Run(fmt.Sprint("logReaches=", reaches), func(t *testing.T) {
			dir, _ := requiredSectionDir(t, 5, reaches)
			before := dirListing(t, dir)
			q, err := Open(dir, fixtureOptions(NewManualClock(fixtureTime.Add(time.Minute))))
			if err == nil {
				q.Close()
				t.Fatalf("a snapshot with a required section of a newer walq opened")
			}
			t.Logf("Open: %v", err)
			if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt) {
				t.Errorf("Open = %v: want ErrNewerFormat, not corruption (newer=%v corrupt=%v)",
					err, errors.Is(err, ErrNewerFormat), errors.Is(err, ErrCorrupt))
			}
			if after := dirListing(t, dir); after != before {
				t.Errorf("changed:\n%s\n%s", before, after)
			}
		})
	}
}

// TestRequiredSnapshotSectionNeverCompactedAway: before, this build
// opened such a directory by falling back past the snapshot, and its next
// compaction removed the newer walq's snapshot. Now the open is refused,
// and the file stays.
func TestRequiredSnapshotSectionNeverCompactedAway(t *testing.T) {
	dir, name := requiredSectionDir(t, 5, true)
	q, err := Open(dir, fixtureOptions(NewManualClock(fixtureTime.Add(time.Minute))))
	if err != nil {
		if !errors.Is(err, ErrNewerFormat) {
			t.Fatalf("Open = %v, want ErrNewerFormat", err)
		}
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("the refused open removed the newer walq's snapshot: %v", err)
		}
		return
	}
	mustPut(t, q, "more")
	must(t, q.Compact())
	must(t, q.Close())
	if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
		t.Logf("the newer walq's snapshot %s is still there", name)
	} else {
		t.Errorf("opened a directory with a required section, then removed the newer walq's snapshot %s: %v", name, err)
	}
}

// TestFeaturesFileTurnsAwayAtTheDoor: the file walq-features, which a
// directory gains when it first uses a required feature (format-next.md),
// is a reserved name this build does not know: Open refuses the directory
// with ErrNewerFormat naming it, before it reads or changes anything.
func TestFeaturesFileTurnsAwayAtTheDoor(t *testing.T) {
	dir := copyDir(t, "testdata/format2-fields")
	must(t, os.WriteFile(filepath.Join(dir, "walq-features"), []byte("item-attempts\n"), 0o600))
	before := dirListing(t, dir)
	_, err := Open(dir, fixtureOptions(NewManualClock(fixtureTime.Add(time.Minute))))
	if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "walq-features") {
		t.Fatalf("Open = %v, want ErrNewerFormat naming walq-features", err)
	}
	if after := dirListing(t, dir); after != before {
		t.Fatalf("the refused open changed the directory:\nbefore %v\nafter  %v", before, after)
	}
}
