//go:build long

package jetstream_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// TestMoveKilledAndRerun: walq-to-jetstream is killed with SIGKILL in the
// middle of a move, then run again: every item of the directory is in
// JetStream exactly once (ready, delayed at its due time, dead letters
// with their history), none lost, none twice; the directory is unchanged
// throughout; -remove then removes it.
func TestMoveKilledAndRerun(t *testing.T) {
	bin, err := buildMover()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wants := fillDir(t, dir)
	before := digest(t, dir)
	s := startServer(t, t.TempDir(), 0)
	defer s.Shutdown()

	// First run: paced, killed once it has moved a third.
	cmd := exec.Command(bin, "-dir", dir, "-server", s.ClientURL(), "-to", "moved", "-batch", "40", "-pace", "30ms")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	moved := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 4 && f[0] == "moved" {
			moved, _ = strconv.Atoi(f[1])
			if moved >= len(wants)/3 {
				break
			}
		}
	}
	if moved < len(wants)/3 {
		cmd.Wait()
		t.Fatalf("the move ended before a third: %s", stderr.String())
	}
	// At a moment that falls anywhere in the next batch or pause: an
	// uncommitted batch is dropped by the server, a committed one counts.
	time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	t.Logf("walq-to-jetstream killed with SIGKILL after it reported %d items moved", moved)
	if digest(t, dir) != before {
		t.Fatal("the killed move changed the walq directory")
	}
	// The directory is not held by a dead process's lock: a walq queue
	// could open it (the move does not write to it).

	// Second run: to the end.
	res, err := exec.Command(bin, "-dir", dir, "-server", s.ClientURL(), "-to", "moved").CombinedOutput()
	if err != nil {
		t.Fatalf("rerun: %v: %s", err, res)
	}
	t.Logf("rerun: %s", strings.TrimSpace(string(res)))
	if digest(t, dir) != before {
		t.Fatal("the rerun changed the walq directory")
	}
	// A third run moves nothing.
	res, err = exec.Command(bin, "-dir", dir, "-server", s.ClientURL(), "-to", "moved").CombinedOutput()
	if err != nil || !strings.Contains(string(res), "moved by an earlier run") {
		t.Fatalf("third run: %v: %s", err, res)
	}

	// What JetStream holds.
	got := map[uint64]int{}
	ctx := context.Background()
	for _, name := range []string{"", "mail", "held"} {
		q, err := openQueue(s.ClientURL(), "moved", name, walqjs.Options{}, walqjs.QueueOptions{Priorities: []int{-1, 0, 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		for {
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			m, err := q.Get(gctx)
			cancel()
			if err != nil {
				break
			}
			got[m.ID]++
			w, ok := wants[m.ID]
			switch {
			case !ok:
				t.Errorf("item %d (%q) was never put", m.ID, m.Body)
			case w.dead:
				t.Errorf("dead letter %d delivered", m.ID)
			case string(m.Body) != w.body || m.Queue != w.queue || m.Key != w.key || m.Priority != w.prio:
				t.Errorf("item %d: %q queue %q key %q prio %d; want %+v", m.ID, m.Body, m.Queue, m.Key, m.Priority, w)
			case m.Attempt != w.attempts+1:
				t.Errorf("item %d (%q): attempt %d, want %d", m.ID, m.Body, m.Attempt, w.attempts+1)
			case !w.due.IsZero() && time.Now().Before(w.due):
				t.Errorf("item %d delayed until %v delivered early", m.ID, w.due)
			}
			q.Ack(m.Receipt)
		}
		dl, err := q.DeadLetters(0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dl {
			got[d.ID]++
			w := wants[d.ID]
			if !w.dead || string(d.Body) != w.body || d.LastError != w.cause || d.Attempts != w.attempts || len(d.History) != w.history {
				t.Errorf("dead letter %d: %q %q attempts %d history %d; want %+v", d.ID, d.Body, d.LastError, d.Attempts, len(d.History), w)
			}
		}
	}
	lost, twice := 0, 0
	for id := range wants {
		switch got[id] {
		case 0:
			lost++
		case 1:
		default:
			twice++
		}
	}
	t.Logf("after the kill and the rerun: %d items expected, %d found, %d lost, %d more than once", len(wants), len(got), lost, twice)
	if lost > 0 || twice > 0 {
		t.Fatalf("%d lost, %d duplicated", lost, twice)
	}

	// A moved item's key is not held on JetStream (see the README).
	kq, err := openQueue(s.ClientURL(), "moved", "", walqjs.Options{}, walqjs.QueueOptions{Priorities: []int{-1, 0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kq.Put(ctx, []byte("same key"), walq.WithKey("key-0")); err != nil {
		t.Fatalf("a put with a moved item's key: %v", err)
	}
	kq.Close()

	// -remove: the directory goes, now that the move has finished.
	res, err = exec.Command(bin, "-dir", dir, "-server", s.ClientURL(), "-to", "moved", "-remove").CombinedOutput()
	if err != nil {
		t.Fatalf("-remove: %v: %s", err, res)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after -remove: %v", err)
	}
}

var buildMover = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "walq-to-jetstream-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "walq-to-jetstream")
	out, err := exec.Command("go", "build", "-o", bin, "./cmd/walq-to-jetstream").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build walq-to-jetstream: %v: %s", err, out)
	}
	return bin, nil
})

func digest(t *testing.T, dir string) [32]byte {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v %v\n", path, info.Mode(), info.ModTime().UnixNano())
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

// want is what a moved item must look like.
type want struct {
	queue    string
	body     string
	key      string
	prio     int
	attempts int // before the move
	due      time.Time
	dead     bool
	cause    string
	history  int
}

// fillDir makes a walq directory with every kind of item a move carries.
func fillDir(t *testing.T, dir string) map[uint64]want {
	t.Helper()
	ctx := context.Background()
	q, err := walq.Open(dir, walq.Options{MaxAttempts: 2, Backoff: func(int) time.Duration { return 0 }, Visibility: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	mail, err := q.OpenQueue("mail", walq.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wants := map[uint64]want{}
	add := func(qq *walq.Queue, name, body string, w want, opts ...walq.PutOption) uint64 {
		id, err := qq.Put(ctx, []byte(body), opts...)
		if err != nil {
			t.Fatal(err)
		}
		w.queue, w.body = name, body
		wants[id] = w
		return id
	}
	// Dead letters first (the queue hands out its oldest first): two
	// failed attempts each.
	for i := range 30 {
		add(mail, "mail", fmt.Sprintf("dead %d", i), want{dead: true, attempts: 2, cause: fmt.Sprintf("boom %d", i), history: 2})
	}
	for range 60 {
		m, ok, err := mail.TryGet()
		if err != nil || !ok {
			t.Fatalf("lease: %v %v", ok, err)
		}
		mail.Nack(m.Receipt, fmt.Errorf("boom %s", strings.TrimPrefix(string(m.Body), "dead ")))
	}
	// Retried once, then back: an attempt before the move.
	for i := range 20 {
		add(mail, "mail", fmt.Sprintf("retried %d", i), want{attempts: 1, history: 1, prio: 1}, walq.WithPriority(1))
	}
	for range 20 {
		m, ok, _ := mail.TryGet()
		if !ok {
			t.Fatal("no retried item")
		}
		mail.Nack(m.Receipt, errors.New("once"))
	}
	for i := range 1500 {
		var opts []walq.PutOption
		w := want{prio: i%3 - 1}
		opts = append(opts, walq.WithPriority(w.prio))
		if i%7 == 0 {
			w.key = fmt.Sprintf("key-%d", i)
			opts = append(opts, walq.WithKey(w.key))
		}
		if i%11 == 0 {
			opts = append(opts, walq.WithDeadline(time.Now().Add(time.Hour)))
		}
		add(q, "", fmt.Sprintf("ready %d", i), w, opts...)
	}
	for i := range 100 {
		d := 4*time.Second + time.Duration(i)*20*time.Millisecond
		add(q, "", fmt.Sprintf("delayed %d", i), want{due: time.Now().Add(d)}, walq.WithDelay(d))
	}
	for i := range 300 {
		add(mail, "mail", fmt.Sprintf("mail %d", i), want{})
	}
	// Leased when the directory closes: moved as ready, the lease counted.
	held, err := q.OpenQueue("held", walq.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		add(held, "held", fmt.Sprintf("leased %d", i), want{attempts: 1})
	}
	for range 5 {
		if _, ok, err := held.TryGet(); err != nil || !ok {
			t.Fatalf("lease: %v %v", ok, err)
		}
	}
	// Past its deadline by the time of the move: not moved.
	for i := range 10 {
		if _, err := q.Put(ctx, []byte(fmt.Sprintf("expiring %d", i)), walq.WithDeadline(time.Now().Add(300*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // the expiring items' deadlines pass
	return wants
}
