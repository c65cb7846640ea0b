package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// reviewStats is a Source whose counters the test sets.
type reviewStats struct {
	Source
	nacked, dead, acked uint64
}

func (s *reviewStats) fix(q QueueSummary) QueueSummary {
	q.Stats.Nacked, q.Stats.DeadLettered, q.Stats.Acked = s.nacked, s.dead, s.acked
	return q
}

func (s *reviewStats) Queues() ([]QueueSummary, error) {
	qs, err := s.Source.Queues()
	for i := range qs {
		qs[i] = s.fix(qs[i])
	}
	return qs, err
}

func (s *reviewStats) Queue(n string) (QueueSummary, error) {
	q, err := s.Source.Queue(n)
	return s.fix(q), err
}

// TestFailedCountSaturates: "a counter of any size renders". The
// Failed figure is Nacked+Expired+DeadLettered summed in a uint64: with
// 2^63 nacks and 2^63 dead letters the queue page says Failed 0.
func TestFailedCountSaturates(t *testing.T) {
	f := newFixture(t, nil)
	h, err := New(&reviewStats{Source: mustSource(t, f), nacked: 1 << 63, dead: 1 << 63}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, newRequest(http.MethodGet, "/q/mail/"))
	if strings.Contains(rec.Body.String(), "<dt>Failed</dt><dd>0</dd>") {
		t.Fatal("2^63 nacks and 2^63 dead letters show as Failed 0 (the uint64 sum wrapped)")
	}
}

// TestChartTakesACounterResetAsAReset: a Source's counters can
// go down (a custom Source over a service that restarted; a queue deleted
// and created again under its name starts its counters at 0). rates
// subtracts samples as uint64: a drop of acks from 1,000 to 0 wraps to
// ~2^64, charted as a peak of ~1.8e18 done a minute (and a wrapped sum).
func TestChartTakesACounterResetAsAReset(t *testing.T) {
	f := newFixture(t, nil)
	src := &reviewStats{Source: mustSource(t, f), acked: 1000}
	h, err := New(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s, err := src.Queue("mail")
	if err != nil {
		t.Fatal(err)
	}
	h.rates.observe(s, time.Now().Add(-10*time.Minute)) // a sample ten minutes ago
	src.acked = 0                                       // the counters started over
	page := httptestGet(t, h, "/q/mail/")
	i := strings.Index(page, "last hour: ")
	if i < 0 {
		t.Fatal("no chart label")
	}
	label := page[i : i+strings.IndexByte(page[i:], '"')]
	if !strings.HasPrefix(label, "last hour: 0 done") {
		t.Fatalf("after the acked counter went from 1000 to 0, the chart says %q", label)
	}
}
