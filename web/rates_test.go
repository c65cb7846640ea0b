package web

import (
	"testing"
	"time"

	"github.com/walq/walq"
)

func TestRatesSpreadCountsOverTheMinutes(t *testing.T) {
	r := newRates()
	now := time.Date(2026, 1, 2, 3, 10, 0, 0, time.UTC)
	sum := func(put, acked, nacked uint64) QueueSummary {
		return QueueSummary{Name: "q", Stats: walq.Stats{Put: put, Acked: acked, Nacked: nacked}}
	}
	r.observe(sum(100, 50, 0), now.Add(-4*time.Minute))
	r.observe(sum(101, 51, 1), now.Add(-4*time.Minute+time.Second)) // too soon: not kept
	r.observe(sum(220, 170, 4), now.Add(-2*time.Minute))            // 120 done over two minutes
	ms := r.minutes("q", now)
	if len(ms) != chartBins+1 {
		t.Fatalf("%d bins", len(ms))
	}
	var done, failed, put uint64
	for _, m := range ms {
		done += m.Acked
		failed += m.Failed
		put += m.Put
	}
	if done != 120 || failed != 4 || put != 120 {
		t.Fatalf("spread %d done, %d failed, %d put; want 120, 4, 120", done, failed, put)
	}
	// Two whole minutes, 60 each.
	last := len(ms) - 1
	if ms[last-4].Acked != 60 || ms[last-3].Acked != 60 || ms[last-2].Acked != 0 {
		t.Fatalf("minutes %+v %+v %+v", ms[last-4], ms[last-3], ms[last-2])
	}
	// Samples older than the chart's span go.
	r.observe(sum(300, 200, 4), now.Add(2*time.Hour))
	if n := len(r.byQueue["q"]); n != 2 {
		t.Fatalf("%d samples kept after two hours, want 2 (the last before the span and the new one)", n)
	}
	c := newChart(ms)
	if c.SumDone != 120 || c.MaxDone != 60 || c.Done == "" {
		t.Fatalf("chart %+v", c)
	}
}
