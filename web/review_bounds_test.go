package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/walq/walq"
)

// reviewCountingSource counts what the dashboard asks of a Source: list
// calls, the items those calls looked at, and bodies read.
type reviewCountingSource struct {
	Source
	lists, scanned, bodies atomic.Int64
}

func (s *reviewCountingSource) ListItems(q string, o walq.ListOptions) (walq.ItemPage, error) {
	s.lists.Add(1)
	p, err := s.Source.ListItems(q, o)
	s.scanned.Add(int64(p.Scanned))
	return p, err
}

func (s *reviewCountingSource) ItemBody(q string, id uint64) ([]byte, error) {
	s.bodies.Add(1)
	return s.Source.ItemBody(q, id)
}

// TestRedactedSearchKeepsItsBudget: dashboard.md says lists
// come from walks bounded by a budget of items looked at (100,000, or
// 5,000 with a body search). With a FormatBody set, one GET of a body
// search in a queue whose matching items are sparse (here mail has two
// ready items around 105,000 items of the default queue, which share the
// ID order) walks every stored item of the directory in one request.
func TestRedactedSearchKeepsItsBudget(t *testing.T) {
	f := newFixture(t, nil)
	f.put(f.named, "first mail")
	batch := make([]walq.Item, 1000)
	for i := range batch {
		batch[i] = walq.Item{Body: []byte("x")}
	}
	for range 105 {
		if _, err := f.q.PutBatch(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	f.put(f.named, "last mail")
	cs := &reviewCountingSource{Source: mustSource(t, f)}
	h, err := New(cs, Options{FormatBody: func(_ string, _ walq.ItemView, b []byte) []byte { return b }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	page := httptestGet(t, h, "/q/mail/?state=ready&q=nothing-matches&body=1")
	if n := cs.scanned.Load(); n > walq.DefaultListBudget {
		i := strings.Index(page, `id="covered">`)
		t.Fatalf("one redacted body search looked at %d stored items in %d ListItems calls (documented bound: %d, or %d with a body search); page says %q",
			n, cs.lists.Load(), walq.DefaultListBudget, walq.DefaultBodyBudget, page[i:i+90])
	}
}

// TestBulkPrepareRefusedBeforeMatching: dashboard.md: "with 8
// running a new one gets 503". It does, but only after the whole match:
// every dead letter is walked and (with a body search through a redactor)
// every body read and formatted, up to MaxBulk IDs held, before the cap is
// looked at. Any number of such prepares run at once.
func TestBulkPrepareRefusedBeforeMatching(t *testing.T) {
	var formatted atomic.Int64
	f := newFixtureWith(t, Options{Access: fullAccess, FormatBody: func(_ string, _ walq.ItemView, b []byte) []byte {
		formatted.Add(1)
		return b
	}})
	for range 20 {
		f.put(f.named, "dead body")
	}
	f.kill(f.named, 20, "boom")
	for i := range maxHolding {
		if err := f.h.jobs.add(&job{ID: "running-" + string(rune('a'+i)), Queue: "mail", State: "running", cancel: make(chan struct{})}); err != nil {
			t.Fatal(err)
		}
	}
	code, _ := f.post("/q/mail/bulk", url.Values{"action": {"purge"}, "state": {"dead"}, "q": {"zzz"}, "body": {"1"}})
	if code != http.StatusServiceUnavailable {
		t.Fatalf("a prepare beside %d running jobs: %d, want 503", maxHolding, code)
	}
	if n := formatted.Load(); n != 0 {
		t.Fatalf("a prepare refused with 503 (%d bulk actions running) first read and formatted %d bodies: the cap is checked after the match", maxHolding, n)
	}
}
