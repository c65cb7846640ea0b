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
