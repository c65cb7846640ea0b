package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"testing"
	"time"

	"github.com/walq/walq"
)

// BenchmarkPages1M renders every page over a queue holding 1,000,000
// items: ready, delayed, leased and dead, all with keys, one in 200 of a
// smaller priority (so that the head's first 1,000 lie spread over the
// IDs). Server time only: the
// handler is called directly. Run it with
//
//	go test ./web -run x -bench Pages1M -benchtime 20x
//
// (about a minute to fill the queue; TMPDIR on a fast disk).
func BenchmarkPages1M(b *testing.B) {
	const total, rounds, deadPerRound, leased = 1_000_000, 10, 1_000, 1_000
	q, err := walq.Open(b.TempDir(), walq.Options{Sync: walq.SyncNever, MaxAttempts: 1, Visibility: time.Hour,
		DisableAutoCompact: true})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	start := time.Now()
	var mid time.Time
	var someDead, someKey uint64
	for r := range rounds {
		if r == rounds/2 {
			mid = time.Now()
		}
		for i := 0; i < total/rounds; i += 1000 {
			items := make([]walq.Item, 1000)
			for j := range items {
				n := r*total/rounds + i + j
				items[j] = walq.Item{Body: fmt.Appendf(nil, `{"n":%d,"to":"user%d@example.com"}`, n, n%977), Key: fmt.Sprint("k", n)}
				if n%10 == 0 {
					items[j].Delay = time.Hour
				}
				if n%200 == 7 {
					items[j].Priority = -1 // the head's first 1,000 spread over 200,000 IDs
				}
			}
			if _, err := q.PutBatch(ctx, items); err != nil {
				b.Fatal(err)
			}
		}
		for i := range deadPerRound {
			m, ok, err := q.TryGet()
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			cause := "smtp: 550 mailbox full"
			if i%100 == 0 {
				cause = "rare: certificate expired"
			}
			if err := q.DeadLetter(m.Receipt, errors.New(cause)); err != nil {
				b.Fatal(err)
			}
			someDead = m.ID
		}
	}
	for range leased {
		m, _, err := q.TryGet()
		if err != nil {
			b.Fatal(err)
		}
		someKey = m.ID + 5
	}
	// A small queue in the big directory: its pages must not walk the
	// other queue's items.
	small, err := q.OpenQueue("small", walq.QueueOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10 {
		if _, err := small.Put(ctx, fmt.Appendf(nil, "small %d", i)); err != nil {
			b.Fatal(err)
		}
	}
	st := q.StatsNow()
	b.Logf("filled in %v: %d items: %d ready, %d delayed, %d leased, %d dead", time.Since(start).Round(time.Millisecond),
		st.Items, st.Ready, st.Delayed, st.Leased, st.Dead)
	if st.Items != total {
		b.Fatalf("%d items stored, want %d", st.Items, total)
	}
	src, err := Queues(q, small)
	if err != nil {
		b.Fatal(err)
	}
	h, err := New(src, Options{Access: fullAccess})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	midQ := mid.UTC().Format(time.RFC3339Nano)
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"ready", "/q/_default/?state=ready"},
		{"ready-deep", "/q/_default/?state=ready&after=900000"},
		{"delayed", "/q/_default/?state=delayed"},
		{"leased", "/q/_default/?state=leased"},
		{"dead", "/q/_default/?state=dead"},
		{"dead-deep", fmt.Sprintf("/q/_default/?state=dead&after=%d", someDead-500)},
		{"by-id", fmt.Sprintf("/q/_default/?state=&id=%d", someKey)},
		{"by-key", fmt.Sprintf("/q/_default/?state=&key=k%d", someKey)},
		{"time-range", "/q/_default/?state=ready&from=" + midQ},
		{"error-search", "/q/_default/?state=dead&q=rare"},
		{"body-search", "/q/_default/?state=&q=user976@&body=1"},
		{"body-search-none", "/q/_default/?state=&q=nowhere&body=1"},
		{"head-100", "/q/_default/head"},
		{"head-1000", "/q/_default/head?n=1000"},
		{"small-ready", "/q/small/?state=ready"},
		{"small-dead", "/q/small/?state=dead"},
		{"small-head-1000", "/q/small/head?n=1000"},
		{"item", fmt.Sprintf("/q/_default/item/%d", someDead)},
		{"raw", fmt.Sprintf("/q/_default/item/%d/raw", someDead)},
	}
	// render measures the page at path, and reports the worst render
	// and the rows it shows.
	render := func(b *testing.B, path string) {
		var worst time.Duration
		for b.Loop() {
			t0 := time.Now()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, newRequest(http.MethodGet, path))
			if rec.Code != http.StatusOK {
				b.Fatalf("%s: %d\n%s", path, rec.Code, rec.Body)
			}
			worst = max(worst, time.Since(t0))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, newRequest(http.MethodGet, path))
		b.ReportMetric(float64(strings.Count(rec.Body.String(), `<tr id="item-`)+strings.Count(rec.Body.String(), `<tr><td class="num">`)), "rows")
		b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) { render(b, p.path) })
	}
	// The head's worst case: fewer than 1,000 ready items have the
	// queue's smallest priority, so no early stop is possible and the
	// walk looks at every item.
	for i := range 10 {
		if _, err := q.Put(ctx, fmt.Appendf(nil, "urgent %d", i), walq.WithPriority(-9)); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("head-1000-few-urgent", func(b *testing.B) { render(b, "/q/_default/head?n=1000") })
}
