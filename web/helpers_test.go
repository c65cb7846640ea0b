package web

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq"
)

// logBuffer collects what a queue logs, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// fixture is a live queue directory with a dashboard in front of it.
type fixture struct {
	t      *testing.T
	q      *walq.Queue // the default queue
	named  *walq.Queue // queue "mail"
	h      *Handler
	srv    *httptest.Server
	log    *logBuffer
	client *http.Client
}

func newFixture(t *testing.T, access func(*http.Request) Access) *fixture {
	t.Helper()
	return newFixtureWith(t, Options{Access: access})
}

// newFixtureWith is newFixture with the dashboard's options (whose
// LiveInterval it sets to 50 ms).
func newFixtureWith(t *testing.T, opts Options) *fixture {
	t.Helper()
	logs := &logBuffer{}
	q, err := walq.Open(t.TempDir(), walq.Options{
		Sync: walq.SyncNever, MaxAttempts: 1, Backoff: func(int) time.Duration { return 0 },
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	named, err := q.OpenQueue("mail", walq.QueueOptions{MaxInFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	src, err := Queues(q, named)
	if err != nil {
		t.Fatal(err)
	}
	opts.LiveInterval = 50 * time.Millisecond
	h, err := New(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/queues/", http.StripPrefix("/ops/queues", h))
	srv := httptest.NewServer(mux)
	f := &fixture{t: t, q: q, named: named, h: h, srv: srv, log: logs,
		client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	t.Cleanup(func() {
		srv.Close()
		h.Close()
		q.Close()
	})
	return f
}

func fullAccess(*http.Request) Access { return FullAccess }

// url is the dashboard's URL for path (which starts with "/").
func (f *fixture) url(path string) string { return f.srv.URL + "/ops/queues" + path }

// get fetches path and returns the status and body.
func (f *fixture) get(path string) (int, http.Header, string) {
	f.t.Helper()
	resp, err := f.client.Get(f.url(path))
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// post submits a form to path from the dashboard's own origin.
func (f *fixture) post(path string, form url.Values) (int, string) {
	f.t.Helper()
	resp := f.postResp(path, form)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// postResp is post's response, its body to close.
func (f *fixture) postResp(path string, form url.Values) *http.Response {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.url(path), strings.NewReader(form.Encode()))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp
}

// put stores bodies in q and returns their IDs.
func (f *fixture) put(q *walq.Queue, bodies ...string) []uint64 {
	f.t.Helper()
	var ids []uint64
	for _, b := range bodies {
		id, err := q.Put(context.Background(), []byte(b))
		if err != nil {
			f.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// kill leases the next n items of q and dead-letters each with cause.
func (f *fixture) kill(q *walq.Queue, n int, cause string) []uint64 {
	f.t.Helper()
	var ids []uint64
	for range n {
		m, ok, err := q.TryGet()
		if err != nil || !ok {
			f.t.Fatalf("TryGet: %v %v", ok, err)
		}
		if err := q.DeadLetter(m.Receipt, errors.New(cause)); err != nil {
			f.t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

// deadIDs lists q's dead letters' IDs.
func deadIDs(q *walq.Queue) map[uint64]bool {
	out := make(map[uint64]bool)
	for _, d := range q.DeadLetters(0) {
		out[d.ID] = true
	}
	return out
}

// newRequest is httptest.NewRequest (of no body) for a host the
// dashboard answers.
func newRequest(method, path string) *http.Request {
	r := httptest.NewRequest(method, path, nil)
	r.Host = "localhost"
	return r
}

// httptestGet serves path through h and returns the body.
func httptestGet(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, newRequest(http.MethodGet, path))
	return rec.Body.String()
}

// prepare posts a bulk action's form to path and returns the job it
// redirects to, under the queue's path (post, redirect, get: a reload of the page that asks makes
// no second job).
func (f *fixture) prepare(path string, form url.Values) string {
	f.t.Helper()
	resp := f.postResp(path, form)
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	_, id, ok := strings.Cut(loc, "/jobs/")
	if resp.StatusCode != http.StatusSeeOther || !ok || loc != "/ops/queues"+strings.TrimSuffix(path, "/bulk")+"/jobs/"+id {
		f.t.Fatalf("prepare %s: %d to %q, want 303 to the job's page", path, resp.StatusCode, loc)
	}
	return id
}
