package walq_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/walq/walq"
)

// dirDigest hashes every file of dir, names and contents.
func dirDigest(t *testing.T, dir string) [32]byte {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		h.Write([]byte(path))
		if d.Type().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// TestReadDir: ReadDir finds every stored item of every queue with its
// fields, and changes nothing on disk.
func TestReadDir(t *testing.T) {
	dir := t.TempDir()
	q, err := walq.Open(dir, walq.Options{MaxAttempts: 2, Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mail, err := q.OpenQueue("mail", walq.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	ready, _ := q.Put(ctx, []byte("ready"), walq.WithKey("k1"), walq.WithPriority(2))
	delayed, _ := q.Put(ctx, []byte("delayed"), walq.WithDelay(time.Hour), walq.WithDeadline(deadline.Add(time.Hour)))
	deadID, _ := mail.Put(ctx, []byte("dead"), walq.WithPriority(5))
	for range 2 {
		m, ok, err := mail.TryGet()
		if err != nil || !ok || m.ID != deadID {
			t.Fatalf("lease the item to kill: %v %v %v", m.ID, ok, err)
		}
		mail.Nack(m.Receipt, errors.New("boom"))
	}
	leased, _ := mail.Put(ctx, []byte("leased"), walq.WithDeadline(deadline))
	if m, ok, err := mail.TryGet(); err != nil || !ok || m.ID != leased {
		t.Fatalf("lease: %v %v %v", m.ID, ok, err)
	}
	q.Close()

	before := dirDigest(t, dir)
	got := map[uint64]walq.StoredItem{}
	info, err := walq.ReadDir(dir, func(it walq.StoredItem) error {
		got[it.ID] = it
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if dirDigest(t, dir) != before {
		t.Fatal("ReadDir changed the directory")
	}
	if info.NextID <= leased || len(info.Queues) != 2 || info.Queues[0] != "" || info.Queues[1] != "mail" {
		t.Fatalf("info %+v", info)
	}
	r := got[ready]
	if string(r.Body) != "ready" || r.Key != "k1" || r.Priority != 2 || r.Dead || r.Leased || r.Queue != "" || r.Due.After(time.Now()) {
		t.Fatalf("ready item: %+v", r)
	}
	d := got[delayed]
	if d.Due.Before(time.Now().Add(59*time.Minute)) || !near(d.Deadline, deadline.Add(time.Hour)) {
		t.Fatalf("delayed item: due %v deadline %v", d.Due, d.Deadline)
	}
	x := got[deadID]
	if !x.Dead || x.Queue != "mail" || x.Priority != 5 || x.Attempts != 2 || x.LastError != "boom" || len(x.History) < 2 || x.History[len(x.History)-1].How != "nack" || x.DeadAt.IsZero() {
		t.Fatalf("dead item: %+v", x)
	}
	l := got[leased]
	if !l.Leased || l.Queue != "mail" || l.Attempts != 1 || !near(l.Deadline, deadline) {
		t.Fatalf("leased item: %+v", l)
	}
	// An error of fn stops the read.
	stop := errors.New("stop")
	if _, err := walq.ReadDir(dir, func(walq.StoredItem) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("fn's error: %v", err)
	}
	if _, err := walq.ReadDir(t.TempDir(), func(walq.StoredItem) error { return nil }); err == nil {
		t.Fatal("ReadDir of an empty directory")
	}
}

// near: queue times are translated through the clock offset walq reads,
// to within microseconds.
func near(a, b time.Time) bool { return a.Sub(b).Abs() < time.Millisecond }
