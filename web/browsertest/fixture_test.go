//go:build long

package browsertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/walq/walq"
	"github.com/walq/walq/web"
)

// fixture is a live queue directory with a dashboard in front of it, at
// /ops/queues/ of a test server, as a service mounts it.
type fixture struct {
	t     *testing.T
	q     *walq.Queue // the default queue
	named *walq.Queue // queue "mail"
	srv   *httptest.Server
}

func newFixture(t *testing.T, access func(*http.Request) web.Access) *fixture {
	t.Helper()
	q, err := walq.Open(t.TempDir(), walq.Options{
		Sync: walq.SyncNever, MaxAttempts: 1, Backoff: func(int) time.Duration { return 0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	named, err := q.OpenQueue("mail", walq.QueueOptions{MaxInFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	src, err := web.Queues(q, named)
	if err != nil {
		t.Fatal(err)
	}
	src = readHistoryFirst{src, map[string]*walq.Queue{"": q, "mail": named}}
	h, err := web.New(src, web.Options{Access: access, LiveInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/queues/", http.StripPrefix("/ops/queues", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
		q.Close()
	})
	return &fixture{t: t, q: q, named: named, srv: srv}
}

// readHistoryFirst is web.Queues' source, whose charts are drawn from the
// whole log on the first request: web.Queues reads the log in the
// background and draws nothing until it is read, which a screenshot taken
// at once would catch half done.
type readHistoryFirst struct {
	web.Actor
	queues map[string]*walq.Queue
}

func (s readHistoryFirst) History(queue string, since time.Time) ([]web.Minute, time.Time, error) {
	upTo := time.Now()
	q, ok := s.queues[queue]
	if !ok {
		return nil, time.Time{}, web.ErrUnknownQueue
	}
	ms, err := q.Activity(since)
	var out []web.Minute
	for _, m := range ms {
		out = append(out, web.Minute{Start: m.Start, Put: m.Put, Acked: m.Acked, Failed: m.Failed})
	}
	return out, upTo, err
}

func fullAccess(*http.Request) web.Access { return web.FullAccess }

// url is the dashboard's URL for path (which starts with "/").
func (f *fixture) url(path string) string { return f.srv.URL + "/ops/queues" + path }

// get fetches path and returns its body.
func (f *fixture) get(path string) string {
	f.t.Helper()
	resp, err := http.Get(f.url(path))
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		f.t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return string(b)
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

// actionForms are a request for every action, on items that allow it.
func actionForms(dead uint64) map[string]url.Values {
	id := url.Values{"id": {fmt.Sprint(dead)}}
	return map[string]url.Values{
		"/q/mail/redrive":  id,
		"/q/mail/purge":    id,
		"/q/mail/delete":   id,
		"/q/mail/pause":    {"for": {"1h"}},
		"/q/mail/resume":   {},
		"/q/mail/bulk":     {"action": {"purge"}, "state": {"dead"}},
		"/q/mail/bulk?x=1": {"action": {"redrive"}, "state": {"dead"}},
	}
}
