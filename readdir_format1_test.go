package walq

import (
	"testing"
	"time"
)

// TestReadDirFormat1ReadsItsLog: ReadDir reads a format-1 directory's log
// as format 1 wrote it, after its snapshot: it lists the items a queue
// opening the directory finds (before, it read the log as format 2, found
// no segment, and listed only the snapshot's 12 items of 18).
func TestReadDirFormat1ReadsItsLog(t *testing.T) {
	dir := copyDir(t, "testdata/format1")
	listed := map[uint64]string{}
	if _, err := ReadDir(dir, func(it StoredItem) error { listed[it.ID] = string(it.Body); return nil }); err != nil {
		t.Fatal(err)
	}
	q, err := Open(dir, fixtureOptions(NewManualClock(fixtureTime.Add(2*time.Hour))))
	must(t, err)
	defer q.Close()
	page, err := q.ListItems(ListOptions{Limit: MaxListLimit})
	must(t, err)
	if len(page.Items) != len(listed) {
		t.Fatalf("ReadDir listed %d items, the opened queue holds %d", len(listed), len(page.Items))
	}
	for _, it := range page.Items {
		body, err := q.ItemBody(it.ID)
		must(t, err)
		if got, ok := listed[it.ID]; !ok || got != string(body) {
			t.Fatalf("item %d: ReadDir listed %q (%v), the queue holds %q", it.ID, got, ok, body)
		}
	}
}
