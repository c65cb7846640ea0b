package walq

import (
	"github.com/prometheus/client_golang/prometheus"
)

// NewCollector returns a Prometheus collector for q: every figure of Stats
// and Work's counters, with the constant label queue=name. Register it on
// your own registry (walq never touches the global one):
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(walq.NewCollector(q, "emails"))
//
// Each scrape calls q.Stats once. Unregister the collector before closing
// the queue.
func NewCollector(q *Queue, name string) prometheus.Collector {
	c := &collector{q: q}
	labels := prometheus.Labels{"queue": name}
	desc := func(metric, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("walq_"+metric, help, variable, labels)
	}
	gauge := func(metric, help string, value func(*Stats) float64) {
		c.plain = append(c.plain, plainMetric{desc(metric, help), prometheus.GaugeValue, value})
	}
	counter := func(metric, help string, value func(*Stats) float64) {
		c.plain = append(c.plain, plainMetric{desc(metric, help), prometheus.CounterValue, value})
	}

	c.items = desc("items", "Stored items by state: ready, delayed (waiting for their due time or a backoff), leased, dead (dead letters).", "state")
	c.fsync = desc("fsync_duration_seconds", "Time per fsync of the log.")
	c.batch = desc("commit_batch_records", "Records written per group commit (one write and, under SyncAlways, one fsync).")

	gauge("stored_bytes", "Sum of the bodies of the stored items, dead letters included.",
		func(s *Stats) float64 { return float64(s.Bytes) })
	gauge("keys", "Idempotency keys held by a stored item or inside their window after it left.",
		func(s *Stats) float64 { return float64(s.Keys) })

	counter("put_total", "Items put.",
		func(s *Stats) float64 { return float64(s.Put) })
	counter("delivered_total", "Leases started: deliveries of items to consumers.",
		func(s *Stats) float64 { return float64(s.Delivered) })
	counter("acked_total", "Leases ended by an ack: items done.",
		func(s *Stats) float64 { return float64(s.Acked) })
	counter("nacked_total", "Leases ended by a nack: failed attempts.",
		func(s *Stats) float64 { return float64(s.Nacked) })
	counter("leases_expired_total", "Leases that ran out without an ack or nack; the item was redelivered after the backoff, or dead-lettered when out of attempts. Frequent expiries with few dead letters: the visibility is too short or the heartbeat is missing.",
		func(s *Stats) float64 { return float64(s.Expired) })
	counter("dead_lettered_total", "Items moved to the dead-letter list.",
		func(s *Stats) float64 { return float64(s.DeadLettered) })
	counter("discarded_total", "Items discarded at their deadline, undelivered.",
		func(s *Stats) float64 { return float64(s.Discarded) })
	counter("redriven_total", "Dead letters sent back to the queue.",
		func(s *Stats) float64 { return float64(s.Redriven) })
	counter("purged_total", "Dead letters dropped for good.",
		func(s *Stats) float64 { return float64(s.Purged) })
	counter("late_acks_total", "Calls with a receipt whose lease had already ended, since the queue was opened: each is work that may have run twice.",
		func(s *Stats) float64 { return float64(s.LateAcks) })

	gauge("oldest_ready_age_seconds", "How long the oldest ready item has been ready (delayed items excluded).",
		func(s *Stats) float64 { return s.OldestReady.Seconds() })
	gauge("delayed_past_due_seconds", "How far the earliest delayed item is past its due time without a consumer taking it; zero while consumers keep up.",
		func(s *Stats) float64 { return s.DelayedPastDue.Seconds() })

	gauge("log_bytes", "Size of the log segments.",
		func(s *Stats) float64 { return float64(s.LogBytes) })
	gauge("log_segments", "Number of log segments.",
		func(s *Stats) float64 { return float64(s.LogSegments) })
	gauge("live_bytes", "Approximate size of a snapshot of the live state; compaction brings the log back toward it.",
		func(s *Stats) float64 { return float64(s.LiveBytes) })
	counter("compactions_total", "Compactions done since the queue was opened.",
		func(s *Stats) float64 { return float64(s.Compactions) })
	counter("compactions_failed_total", "Compactions that failed since the queue was opened (the log is kept; the next try waits for it to double).",
		func(s *Stats) float64 { return float64(s.CompactionsFailed) })
	gauge("last_compaction_timestamp_seconds", "When the last compaction ended, in Unix seconds; 0 if none since the queue was opened.",
		func(s *Stats) float64 {
			if s.LastCompacted.IsZero() {
				return 0
			}
			return float64(s.LastCompacted.UnixNano()) / 1e9
		})
	gauge("last_compaction_duration_seconds", "How long the last compaction took.",
		func(s *Stats) float64 { return s.LastCompactIn.Seconds() })
	gauge("recovery_duration_seconds", "How long Open took to recover the queue.",
		func(s *Stats) float64 { return s.Recovery.Duration.Seconds() })

	counter("work_handler_errors_total", "Handler calls in Work that returned an error (panics not included).",
		func(st *Stats) float64 { return float64(st.Work.HandlerErrors) })
	counter("work_handler_panics_total", "Handler calls in Work that panicked; each was nacked.",
		func(st *Stats) float64 { return float64(st.Work.Panics) })
	counter("work_handler_timeouts_total", "Handler calls in Work cancelled at WorkOptions.Timeout.",
		func(st *Stats) float64 { return float64(st.Work.Timeouts) })
	counter("work_handlers_abandoned_total", "Handlers in Work that ignored their cancelled context past WorkOptions.Grace; their worker went on without them while their item stayed leased.",
		func(st *Stats) float64 { return float64(st.Work.Abandoned) })
	gauge("work_abandoned_handlers_running", "Abandoned handlers that have not returned yet: goroutines Go cannot stop, each holding its item's lease.",
		func(st *Stats) float64 { return float64(st.Work.AbandonedRunning) })
	counter("work_leases_lost_total", "Heartbeats in Work that found the lease lost; the handler was cancelled at once.",
		func(st *Stats) float64 { return float64(st.Work.LeasesLost) })
	return c
}

type collector struct {
	q            *Queue
	items        *prometheus.Desc
	fsync, batch *prometheus.Desc
	plain        []plainMetric
}

// plainMetric is a gauge or counter read from one Stats value.
type plainMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(*Stats) float64
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.items
	ch <- c.fsync
	ch <- c.batch
	for _, m := range c.plain {
		ch <- m.desc
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.q.Stats()
	for _, s := range []struct {
		state string
		n     int
	}{{"ready", st.Ready}, {"delayed", st.Delayed}, {"leased", st.Leased}, {"dead", st.Dead}} {
		ch <- prometheus.MustNewConstMetric(c.items, prometheus.GaugeValue, float64(s.n), s.state)
	}
	ch <- constHistogram(c.fsync, st.Fsync)
	ch <- constHistogram(c.batch, st.CommitBatch)
	for _, m := range c.plain {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(&st))
	}
}

func constHistogram(desc *prometheus.Desc, h Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b] = h.Counts[i]
	}
	return prometheus.MustNewConstHistogram(desc, h.Count, h.Sum, buckets)
}
