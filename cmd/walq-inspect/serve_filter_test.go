package main

import (
	"context"
	"testing"
	"time"

	"github.com/walq/walq"
)

// TestServePutTimeFilterPastInt64: a put-time bound beyond the years an
// int64 of nanoseconds holds (after 2262, before 1678) bounds as far as
// it can, never the other way round (before, "put from 3026" came out
// before 1970 and matched every item), and so does the --from flag.
func TestServePutTimeFilterPastInt64(t *testing.T) {
	dir := t.TempDir()
	q, err := walq.Open(dir, walq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := q.Put(context.Background(), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	qf, err := listQueue(dir)
	if err != nil {
		t.Fatal(err)
	}
	src, err := newDirSource(qf)
	if err != nil {
		t.Fatal(err)
	}
	far := time.Date(3026, 1, 1, 0, 0, 0, 0, time.UTC)
	early := time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		f    walq.ItemFilter
		want int
	}{
		{"from 3026", walq.ItemFilter{From: far}, 0},
		{"to 3026", walq.ItemFilter{To: far}, 3},
		{"from 1500", walq.ItemFilter{From: early}, 3},
		{"to 1500", walq.ItemFilter{To: early}, 0},
	} {
		page, err := src.ListItems("", walq.ListOptions{Filter: tc.f})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(page.Items) != tc.want {
			t.Errorf("put %s: %d items, want %d", tc.name, len(page.Items), tc.want)
		}
	}
	var tf timeFlag
	if err := tf.Set("3026-01-01T00:00:00Z"); err != nil || tf.ns <= time.Now().UnixNano() {
		t.Fatalf("--from 3026: %d %v, want past now", tf.ns, err)
	}
}

// TestServeBodySearchBudgetAndLock: a search in bodies reads at most
// ListOptions.BodyBytes of them per call and says where to go on, and it
// reads them without the source's lock, so the refresh and the other
// pages go on meanwhile (before, the walk held it across every read).
func TestServeBodySearchBudgetAndLock(t *testing.T) {
	dir := t.TempDir()
	q, err := walq.Open(dir, walq.Options{Sync: walq.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 256<<10)
	for range 12 {
		if _, err := q.Put(context.Background(), big); err != nil {
			t.Fatal(err)
		}
	}
	needle, err := q.Put(context.Background(), []byte("a needle"))
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	qf, err := listQueue(dir)
	if err != nil {
		t.Fatal(err)
	}
	src, err := newDirSource(qf)
	if err != nil {
		t.Fatal(err)
	}
	reads, locked := 0, 0
	searchRead = func() {
		reads++
		if !src.mu.TryLock() {
			locked++
			return
		}
		src.mu.Unlock()
	}
	t.Cleanup(func() { searchRead = nil })
	var after uint64
	var found []uint64
	calls := 0
	for {
		page, err := src.ListItems("", walq.ListOptions{Filter: walq.ItemFilter{Text: "needle", InBody: true}, After: after, BodyBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		calls++
		if page.Searched > 4 || page.SearchedBytes > 1<<20 {
			t.Fatalf("call %d read %d bodies, %d bytes: over the budget of 1 MiB", calls, page.Searched, page.SearchedBytes)
		}
		for _, it := range page.Items {
			found = append(found, it.ID)
		}
		if page.Next == 0 {
			break
		}
		after = page.Next
	}
	if len(found) != 1 || found[0] != needle || calls != 4 {
		t.Fatalf("found %v in %d calls; want [%d] in 4", found, calls, needle)
	}
	if reads != 13 || locked != 0 {
		t.Fatalf("%d bodies read, %d of them under the source's lock; want 13, none", reads, locked)
	}
}
