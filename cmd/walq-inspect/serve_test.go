package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq"

	"github.com/walq/walq/internal/testrule"
)

// dirPrint is every file of dir with its size, mode and content hash:
// serve must leave it as it found it.
func dirPrint(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %v", p, info.Mode(), info.Size(), info.ModTime().UnixNano())
		if !d.IsDir() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", sha256.Sum256(data))
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// serveGet asks srv for path with the Host header host.
func serveGet(t *testing.T, srv *httptest.Server, host, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeLiveThenDead(t *testing.T) {
	dir := t.TempDir()
	q, err := walq.Open(dir, walq.Options{Sync: walq.SyncNever, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	mail, err := q.OpenQueue("mail", walq.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		if _, err := mail.Put(ctx, []byte(fmt.Sprintf("<b>mail %d</b>", i))); err != nil {
			t.Fatal(err)
		}
	}
	m, _, err := mail.TryGet()
	if err != nil {
		t.Fatal(err)
	}
	if err := mail.Nack(m.Receipt, errors.New("smtp: refused")); err != nil {
		t.Fatal(err)
	}

	s, err := newServer(dir, time.Hour) // refreshed by hand below
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer s.close()
	host := srv.Listener.Addr().String()

	code, body := serveGet(t, srv, host, "/")
	if code != http.StatusOK || !strings.Contains(body, `id="row-mail"`) || !strings.Contains(body, `data-count="ready">2<`) {
		t.Fatalf("overview over a live queue: %d\n%s", code, body)
	}
	code, body = serveGet(t, srv, host, fmt.Sprintf("/q/mail/item/%d", m.ID))
	if code != http.StatusOK || !strings.Contains(body, "smtp: refused") || !strings.Contains(body, "&lt;b&gt;mail 0&lt;/b&gt;") {
		t.Fatalf("item page: %d\n%s", code, body)
	}
	if strings.Contains(body, "<form") {
		t.Fatalf("a read-only page offers a form:\n%s", body)
	}

	// The queue goes on; a refresh shows it.
	if _, err := mail.Put(ctx, []byte("more")); err != nil {
		t.Fatal(err)
	}
	if err := s.src.refresh(); err != nil {
		t.Fatal(err)
	}
	if _, body = serveGet(t, srv, host, "/"); !strings.Contains(body, `data-count="ready">3<`) {
		t.Fatalf("after a put and a refresh:\n%s", body)
	}
	// The charts come from the record times in the log.
	minutes, _, err := s.src.History("mail", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var put, failed uint64
	for _, m := range minutes {
		put += m.Put
		failed += m.Failed
	}
	if put != 4 || failed != 1 {
		t.Fatalf("history of mail: %d put, %d failed; want 4 and 1", put, failed)
	}
	if _, body = serveGet(t, srv, host, "/"); !strings.Contains(body, `aria-label="last hour: 0 done, 1 failed`) {
		t.Fatalf("the overview's chart does not show the log's minutes:\n%s", body)
	}

	// Closed: the directory is dead, and serve shows what it left.
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	before := dirPrint(t, dir)
	if err := s.src.refresh(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/", "/q/mail/", "/q/mail/?state=dead", "/q/mail/head", fmt.Sprintf("/q/mail/item/%d/raw", m.ID), "/q/_default/"} {
		if code, body := serveGet(t, srv, host, p); code != http.StatusOK {
			t.Errorf("%s over a dead directory: %d\n%s", p, code, body)
		}
	}
	_, body = serveGet(t, srv, host, "/q/mail/?state=dead")
	if !strings.Contains(body, fmt.Sprintf(`id="item-%d"`, m.ID)) {
		t.Fatalf("dead letters over a dead directory:\n%s", body)
	}

	// Nothing to act with: every action is refused, and nothing on disk
	// changed.
	for _, p := range []string{"/q/mail/redrive", "/q/mail/purge", "/q/mail/pause", "/q/mail/resume", "/q/mail/bulk"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+p, strings.NewReader(url.Values{"id": {fmt.Sprint(m.ID)}, "action": {"purge"}, "state": {"dead"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST %s: %d, want 403", p, resp.StatusCode)
		}
	}
	if after := dirPrint(t, dir); after != before {
		t.Fatalf("serve changed the directory:\nbefore\n%s\nafter\n%s", before, after)
	}
}

func TestServeRefusesForeignHosts(t *testing.T) {
	dir := t.TempDir()
	q, err := walq.Open(dir, walq.Options{Sync: walq.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	s, err := newServer(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer s.close()
	for host, want := range map[string]int{
		"127.0.0.1:8080":          http.StatusOK,
		"localhost:8080":          http.StatusOK,
		"LOCALHOST.":              http.StatusOK,
		"[::1]:8080":              http.StatusOK,
		"127.3.4.5":               http.StatusOK,
		"dash.localhost:1":        http.StatusOK,
		"evil.example":            http.StatusMisdirectedRequest,
		"evil.example:8080":       http.StatusMisdirectedRequest,
		"127.0.0.1.evil.example":  http.StatusMisdirectedRequest,
		"localhost.evil.example":  http.StatusMisdirectedRequest,
		"10.0.0.1:8080":           http.StatusMisdirectedRequest,
		"[::ffff:10.0.0.1]:8080":  http.StatusMisdirectedRequest,
		"[2001:db8::1]:80":        http.StatusMisdirectedRequest,
		"0.0.0.0:8080":            http.StatusMisdirectedRequest,
		"evil.example#127.0.0.1":  http.StatusMisdirectedRequest,
		"127.0.0.1@evil.example":  http.StatusMisdirectedRequest,
		"evil.example/127.0.0.1/": http.StatusMisdirectedRequest,
	} {
		if code, body := serveGet(t, srv, host, "/"); code != want {
			t.Errorf("Host %q: %d, want %d\n%.200s", host, code, want, body)
		}
	}
}

func TestServeAddrMustBeLoopback(t *testing.T) {
	dir := t.TempDir()
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "192.0.2.1:80", "example.com:80", "nonsense"} {
		_, stderr, code := inspect("serve", "--addr", addr, dir)
		if code != exitUsage || !strings.Contains(stderr, "--addr") {
			t.Errorf("--addr %s: exit %d, stderr %q", addr, code, stderr)
		}
	}
}

// serve follows a queue that works while it reads: puts, leases, acks and
// compactions with small segments, so that segments roll and go under
// the replay. Every page answers, and the count of puts never goes back.
func TestServeFollowsAWorkingQueue(t *testing.T) {
	dir := t.TempDir()
	q, err := walq.Open(dir, walq.Options{Sync: walq.SyncNever, SegmentSize: 4096, DisableAutoCompact: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Put(context.Background(), []byte("first")); err != nil {
		t.Fatal(err)
	}
	s, err := newServer(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer s.close()

	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- work(q, stop) }()
	host := srv.Listener.Addr().String()
	var lastPut uint64
	refreshes := 15 // the long tests read 60 times
	if testrule.Long {
		refreshes = 60
	}
	for i := range refreshes {
		if err := s.src.refresh(); err != nil {
			t.Fatalf("refresh %d: %v", i, err)
		}
		sum, err := s.src.Queue("")
		if err != nil {
			t.Fatal(err)
		}
		if sum.Stats.Put < lastPut {
			t.Fatalf("refresh %d: %d puts, after %d", i, sum.Stats.Put, lastPut)
		}
		lastPut = sum.Stats.Put
		for _, p := range []string{"/", "/q/_default/", "/q/_default/head"} {
			if code, body := serveGet(t, srv, host, p); code != http.StatusOK {
				t.Fatalf("refresh %d: %s: %d\n%s", i, p, code, body)
			}
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if lastPut < 2 {
		t.Fatalf("the queue put %d items while serve read it", lastPut)
	}
}

// work puts, leases and acks on q, compacting now and then, until stop.
func work(q *walq.Queue, stop chan struct{}) error {
	ctx := context.Background()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		if _, err := q.Put(ctx, fmt.Appendf(nil, "item %d", i)); err != nil {
			return err
		}
		if i%2 == 0 {
			m, ok, err := q.TryGet()
			if err != nil {
				return err
			}
			if ok {
				if err := q.Ack(m.Receipt); err != nil {
					return err
				}
			}
		}
		if i%200 == 199 {
			if err := q.Compact(); err != nil {
				return err
			}
		}
	}
}
