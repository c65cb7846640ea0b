package web

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/walq/walq"
)

// rates keeps samples of each queue's counters, taken whenever the
// dashboard reads them (each overview, each live update) and at most
// every sampleEvery, for an hour: the charts of a source that does not
// know its history from its log. Between two samples the counts are
// spread evenly over the time between them, so a dashboard nobody looked
// at for ten minutes still shows the right total for them, only flat.
type rates struct {
	mu      sync.Mutex
	byQueue map[string][]sample
}

type sample struct {
	at                 time.Time
	put, acked, failed uint64
}

const (
	sampleEvery = 5 * time.Second
	chartSpan   = time.Hour
	chartBins   = 60
)

func newRates() *rates { return &rates{byQueue: make(map[string][]sample)} }

// observe records the queue's counters at now.
func (r *rates) observe(s QueueSummary, now time.Time) {
	st := s.Stats
	smp := sample{at: now, put: st.Put, acked: st.Acked, failed: failedOf(st)}
	r.mu.Lock()
	defer r.mu.Unlock()
	ss := r.byQueue[s.Name]
	if n := len(ss); n > 0 && now.Sub(ss[n-1].at) < sampleEvery {
		return
	}
	cut := 0
	for cut < len(ss)-1 && now.Sub(ss[cut+1].at) > chartSpan {
		cut++
	}
	r.byQueue[s.Name] = append(ss[cut:], smp)
}

// minutes spreads the queue's samples into the minutes of the last hour
// before now.
func (r *rates) minutes(queue string, now time.Time) []Minute {
	r.mu.Lock()
	ss := append([]sample(nil), r.byQueue[queue]...)
	r.mu.Unlock()
	start := now.Add(-chartSpan).Truncate(time.Minute)
	out := make([]Minute, chartBins+1)
	for i := range out {
		out[i].Start = start.Add(time.Duration(i) * time.Minute)
	}
	for i := 1; i < len(ss); i++ {
		a, b := ss[i-1], ss[i]
		span := b.at.Sub(a.at)
		if span <= 0 {
			continue
		}
		dp, da, df := increase(a.put, b.put), increase(a.acked, b.acked), increase(a.failed, b.failed)
		spread(out, a.at, b.at, func(m *Minute, share float64) {
			m.Put = satAdd(m.Put, shareOf(share, dp))
			m.Acked = satAdd(m.Acked, shareOf(share, da))
			m.Failed = satAdd(m.Failed, shareOf(share, df))
		})
	}
	return out
}

// spread calls add for each minute of out that [from, to) overlaps, with
// the share of the span that falls in it.
func spread(out []Minute, from, to time.Time, add func(*Minute, float64)) {
	span := to.Sub(from)
	for i := range out {
		ms, me := out[i].Start, out[i].Start.Add(time.Minute)
		lo, hi := maxTime(ms, from), minTime(me, to)
		if hi.After(lo) {
			add(&out[i], float64(hi.Sub(lo))/float64(span))
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// chart is a small line chart of two series over the last hour, drawn as
// SVG polylines whose points the server computes.
type chart struct {
	Done, Failed     string // polyline points
	MaxDone, MaxFail uint64
	SumDone, SumFail uint64
	Label            string // what it shows, for a screen reader
}

const chartW, chartH = 120.0, 24.0

func newChart(ms []Minute) chart {
	var c chart
	for _, m := range ms {
		c.MaxDone = max(c.MaxDone, m.Acked)
		c.MaxFail = max(c.MaxFail, m.Failed)
		c.SumDone = satAdd(c.SumDone, m.Acked)
		c.SumFail = satAdd(c.SumFail, m.Failed)
	}
	top := max(c.MaxDone, c.MaxFail, 1)
	line := func(v func(Minute) uint64) string {
		var b strings.Builder
		for i, m := range ms {
			x := float64(i) * chartW / float64(max(len(ms)-1, 1))
			y := chartH - 1 - float64(v(m))*(chartH-2)/float64(top)
			fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
		}
		return strings.TrimSpace(b.String())
	}
	c.Done = line(func(m Minute) uint64 { return m.Acked })
	c.Failed = line(func(m Minute) uint64 { return m.Failed })
	c.Label = fmt.Sprintf("last hour: %d done, %d failed (peak %d and %d a minute)", c.SumDone, c.SumFail, c.MaxDone, c.MaxFail)
	return c
}

// increase is how much a counter went up from a to b. A counter that went
// down was reset (a source's service restarted, a queue deleted and made
// again under its name): it counts from zero, so it went up by b.
func increase(a, b uint64) uint64 {
	if b < a {
		return b
	}
	return b - a
}

// shareOf is the rounded share of n, at most n.
func shareOf(share float64, n uint64) uint64 {
	v := share*float64(n) + 0.5
	if v >= float64(n) {
		return n
	}
	return uint64(v)
}

// satAdd is a + b, or the largest uint64 when that overflows: a counter of
// any size shows as its own value or as the largest there is, never as a
// small one.
func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// failedOf counts the attempts that failed: nacks, expired leases and dead
// letters.
func failedOf(st walq.Stats) uint64 {
	return satAdd(satAdd(st.Nacked, st.Expired), st.DeadLettered)
}
