package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/walq/walq"
)

func TestScratch(t *testing.T) {
	dir := t.TempDir()
	clock := walq.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	q, err := walq.Open(dir, walq.Options{Clock: clock, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		q.Put(context.Background(), []byte("hello world hello world"))
	}
	q.Compact()
	q.Close()
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		t.Log(p, info.Size())
		return nil
	})
}
