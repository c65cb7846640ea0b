package walq

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// NewCollector returns a Prometheus collector for the directory of q: the
// gauges and counters of Stats for each of its queues, and the directory's
// log, fsync, compaction and recovery figures (docs/metrics.md lists the
// series; Stats has more, such as Wakeups and the bodies' figures). Every series carries the
// constant label dir=name; a queue's series also carry queue=<its name>,
// "(default)" for the default queue (no queue name can start with "("). A
// queue's oldest_ready_age_seconds carries paused="true" while the queue
// is paused, so an old item behind a pause shows as what it is. Register
// it on your own registry (walq never touches the global one):
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(walq.NewCollector(q, "emails"))
//
// One collector covers every queue of the directory, those opened later
// and those never opened in this process; a deleted queue's series go with
// it. Unregister the collector before closing the directory.
//
// A directory can hold thousands of queues, and each has 28 series.
// The default queue, the queues named with CollectorQueues and, up to
// CollectorTopN (DefaultCollectorTopN) more, those with the largest
// backlog at each scrape get series of their own; the others are summed
// into queue="(other)", whose oldest ready age has one series for its
// paused queues (paused="true") and one for the others. A scrape so holds
// at most (named + top N + 2) × 28 + 1 queue series and 21 of the
// directory: 2,877 or 2,878 for 20,000 queues with the defaults. The counters of "(other)"
// drop when a queue leaves it for series of its own (rate() reads that as
// a counter reset); name the queues that matter to keep them out of it.
func NewCollector(q *Queue, name string, opts ...CollectorOption) prometheus.Collector {
	c := &collector{q: q, topN: DefaultCollectorTopN, named: make(map[string]bool)}
	for _, o := range opts {
		o(c)
	}
	labels := prometheus.Labels{"dir": name}
	dirDesc := func(metric, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("walq_"+metric, help, variable, labels)
	}
	desc := func(metric, help string, variable ...string) *prometheus.Desc {
		return dirDesc(metric, help, append([]string{"queue"}, variable...)...)
	}
	gauge := func(metric, help string, value func(*Stats) float64) {
		c.plain = append(c.plain, plainMetric{desc(metric, help), prometheus.GaugeValue, value})
	}
	counter := func(metric, help string, value func(*Stats) float64) {
		c.plain = append(c.plain, plainMetric{desc(metric, help), prometheus.CounterValue, value})
	}
	dirGauge := func(metric, help string, value func(*Stats) float64) {
		c.dir = append(c.dir, plainMetric{dirDesc(metric, help), prometheus.GaugeValue, value})
	}
	dirCounter := func(metric, help string, value func(*Stats) float64) {
		c.dir = append(c.dir, plainMetric{dirDesc(metric, help), prometheus.CounterValue, value})
	}

	c.items = desc("items", "Stored items by state: ready, delayed (waiting for their due time or a backoff), leased, dead (dead letters).", "state")
	c.oldest = desc("oldest_ready_age_seconds", "How long the oldest ready item has been ready (delayed items excluded); paused=\"true\" while the queue is paused.", "paused")
	c.fsync = dirDesc("fsync_duration_seconds", "Time per fsync of the log.")
	c.batch = dirDesc("commit_batch_records", "Records written per group commit (one write and, under SyncAlways, one fsync).")

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
	counter("moved_in_total", "Dead letters of another queue redriven into this one.",
		func(s *Stats) float64 { return float64(s.MovedIn) })
	counter("moved_out_total", "Dead letters of this queue redriven into another.",
		func(s *Stats) float64 { return float64(s.MovedOut) })
	gauge("paused", "1 while the queue is paused: it takes puts and delivers nothing.",
		func(s *Stats) float64 { return b2f(s.Paused) })
	gauge("max_in_flight", "The queue's cap on open leases; 0 when it has none.",
		func(s *Stats) float64 { return float64(s.MaxInFlight) })
	counter("late_acks_total", "Calls with a receipt whose lease had already ended, since the queue was opened: each is work that may have run twice.",
		func(s *Stats) float64 { return float64(s.LateAcks) })

	gauge("delayed_past_due_seconds", "How far the queue is behind in moving items that came due out of its delayed heap (its timer moves them as they come due); zero but for moments. Such items count as ready.",
		func(s *Stats) float64 { return s.DelayedPastDue.Seconds() })

	dirGauge("log_bytes", "Size of the log segments.",
		func(s *Stats) float64 { return float64(s.LogBytes) })
	dirGauge("log_segments", "Number of log segments.",
		func(s *Stats) float64 { return float64(s.LogSegments) })
	dirGauge("live_bytes", "Approximate size of a snapshot of the live state; compaction brings the log back toward it.",
		func(s *Stats) float64 { return float64(s.LiveBytes) })
	dirCounter("compactions_total", "Compactions done since the queue was opened.",
		func(s *Stats) float64 { return float64(s.Compactions) })
	dirCounter("compactions_failed_total", "Compactions that failed since the queue was opened; the automatic one is tried again after 1 s, doubling to a minute.",
		func(s *Stats) float64 { return float64(s.CompactionsFailed) })
	dirCounter("compaction_copies_skipped_total", "Compactions that copied no body forward because the disk was nearly full (Options.DiskWatermark).",
		func(s *Stats) float64 { return float64(s.CopiesSkipped) })
	dirGauge("disk_free_bytes", "Free space of the directory's disk, read at each scrape (0 where it cannot be read).",
		func(s *Stats) float64 { return float64(s.DiskFree) })
	dirCounter("puts_refused_disk_total", "Puts refused with ErrDiskFull because they would take the disk below Options.DiskWatermark.",
		func(s *Stats) float64 { return float64(s.DiskRefused) })
	dirCounter("segment_rolls_put_off_total", "Times the log could not start its next segment (a full disk, a failed create) and went on in the one it was writing.",
		func(s *Stats) float64 { return float64(s.RollsPutOff) })
	dirCounter("segments_unreserved_total", "Segments begun without their space set aside (no preallocation on this filesystem, or not the room for a whole segment).",
		func(s *Stats) float64 { return float64(s.UnreservedSegments) })
	dirCounter("body_cache_hits_total", "Deliveries (and dead-letter listings) whose body came from memory: the cache of bodies put recently, or one not yet placed on disk.",
		func(s *Stats) float64 { return float64(s.Bodies.Hits) })
	dirCounter("body_cache_misses_total", "Deliveries whose body was read from the log.",
		func(s *Stats) float64 { return float64(s.Bodies.Misses) })
	dirGauge("body_cache_bytes", "Bytes of bodies held in memory: the cache and bodies whose frames are not yet placed.",
		func(s *Stats) float64 { return float64(s.Bodies.CacheBytes + s.Bodies.UnplacedBytes) })
	dirCounter("body_read_bytes_total", "Bytes of bodies read from the log.",
		func(s *Stats) float64 { return float64(s.Bodies.ReadBytes) })
	dirCounter("body_failures_total", "Stored bodies that could not be read or failed their CRC; each item went to the dead letters, or stays where it is until delivered.",
		func(s *Stats) float64 { return float64(s.Bodies.Failures) })
	dirCounter("relocated_bytes_total", "Bytes of bodies compaction copied forward in the log.",
		func(s *Stats) float64 { return float64(s.Bodies.RelocatedBytes) })
	dirGauge("last_compaction_timestamp_seconds", "When the last compaction ended, in Unix seconds; 0 if none since the queue was opened.",
		func(s *Stats) float64 {
			if s.LastCompacted.IsZero() {
				return 0
			}
			return float64(s.LastCompacted.UnixNano()) / 1e9
		})
	dirGauge("last_compaction_duration_seconds", "How long the last compaction took.",
		func(s *Stats) float64 { return s.LastCompactIn.Seconds() })
	dirGauge("recovery_duration_seconds", "How long Open took to recover the queue.",
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
	q             *Queue
	items, oldest *prometheus.Desc
	fsync, batch  *prometheus.Desc
	plain         []plainMetric // one series per queue
	dir           []plainMetric // one series for the directory
	named         map[string]bool
	topN          int
}

// DefaultCollectorTopN is how many queues beyond the default queue and the
// named ones get series of their own, by backlog (see NewCollector).
const DefaultCollectorTopN = 100

// otherQueues is the queue label of the queues summed together.
const otherQueues = "(other)"

// CollectorOption is an option of NewCollector.
type CollectorOption func(*collector)

// CollectorQueues gives the queues named series of their own at every
// scrape, whatever their backlog.
func CollectorQueues(names ...string) CollectorOption {
	return func(c *collector) {
		for _, n := range names {
			c.named[n] = true
		}
	}
}

// CollectorTopN sets how many queues, beyond the default queue and the
// named ones, get series of their own: those with the largest backlog
// (ready, delayed, leased and dead items) at each scrape. 0 gives none;
// the default is DefaultCollectorTopN.
func CollectorTopN(n int) CollectorOption {
	return func(c *collector) { c.topN = max(n, 0) }
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// queueLabel is a queue's value of the queue label.
func queueLabel(name string) string {
	if name == "" {
		return "(default)"
	}
	return name
}

// plainMetric is a gauge or counter read from one Stats value.
type plainMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(*Stats) float64
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.items
	ch <- c.oldest
	ch <- c.fsync
	ch <- c.batch
	for _, m := range c.plain {
		ch <- m.desc
	}
	for _, m := range c.dir {
		ch <- m.desc
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	infos, err := c.q.Queues()
	if err != nil {
		return // closed or failed: nothing to report
	}
	own := c.ownSeries(infos)
	var other Stats
	others := 0
	var pausedAge time.Duration // the oldest ready item of a paused queue summed
	for i := range infos {
		if !own[i] {
			st := infos[i].Stats
			if st.Paused {
				// Its age goes to a series of its own: an age behind a
				// pause must not hide, nor stand for, a stalled queue.
				pausedAge = max(pausedAge, st.OldestReady)
				st.OldestReady = 0
			}
			addQueueFigures(&other, &st)
			others++
			continue
		}
		c.collectQueue(ch, queueLabel(infos[i].Name), &infos[i].Stats)
	}
	if others > 0 {
		c.collectFigures(ch, otherQueues, &other)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, other.OldestReady.Seconds(), otherQueues, "false")
		if other.Paused {
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, pausedAge.Seconds(), otherQueues, "true")
		}
	}
	st := &infos[0].Stats // the directory's figures are in every queue's
	ch <- constHistogram(c.fsync, st.Fsync)
	ch <- constHistogram(c.batch, st.CommitBatch)
	for _, m := range c.dir {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(st))
	}
}

// ownSeries says which queues of infos get series of their own: the
// default queue, the named ones, and the topN others with the largest
// backlog (ties to the older queue).
func (c *collector) ownSeries(infos []QueueInfo) []bool {
	own := make([]bool, len(infos))
	var rest []int
	for i := range infos {
		if infos[i].ID == 0 || c.named[infos[i].Name] {
			own[i] = true
		} else {
			rest = append(rest, i)
		}
	}
	if len(rest) > c.topN {
		backlog := func(i int) int {
			st := &infos[i].Stats
			return st.Ready + st.Delayed + st.Leased + st.Dead
		}
		slices.SortStableFunc(rest, func(a, b int) int { return cmp.Compare(backlog(b), backlog(a)) })
		rest = rest[:c.topN]
	}
	for _, i := range rest {
		own[i] = true
	}
	return own
}

func (c *collector) collectQueue(ch chan<- prometheus.Metric, queue string, st *Stats) {
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, st.OldestReady.Seconds(), queue, strconv.FormatBool(st.Paused))
	c.collectFigures(ch, queue, st)
}

// collectFigures sends the series of a queue but its oldest ready age.
func (c *collector) collectFigures(ch chan<- prometheus.Metric, queue string, st *Stats) {
	for _, s := range []struct {
		state string
		n     int
	}{{"ready", st.Ready}, {"delayed", st.Delayed}, {"leased", st.Leased}, {"dead", st.Dead}} {
		ch <- prometheus.MustNewConstMetric(c.items, prometheus.GaugeValue, float64(s.n), queue, s.state)
	}
	for _, m := range c.plain {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(st), queue)
	}
}

// addQueueFigures adds the queue figures of src that the collector
// exports to dst: counts and counters summed, ages the oldest, Paused
// while any is, MaxInFlight summed. (Collect gives the oldest ready age of
// the paused queues a series of its own.)
func addQueueFigures(dst, src *Stats) {
	dst.Ready += src.Ready
	dst.Delayed += src.Delayed
	dst.Leased += src.Leased
	dst.Dead += src.Dead
	dst.Items += src.Items
	dst.Bytes += src.Bytes
	dst.Keys += src.Keys
	dst.Put += src.Put
	dst.Delivered += src.Delivered
	dst.Acked += src.Acked
	dst.Nacked += src.Nacked
	dst.Expired += src.Expired
	dst.DeadLettered += src.DeadLettered
	dst.Discarded += src.Discarded
	dst.Redriven += src.Redriven
	dst.Purged += src.Purged
	dst.MovedIn += src.MovedIn
	dst.MovedOut += src.MovedOut
	dst.LateAcks += src.LateAcks
	dst.MaxInFlight += src.MaxInFlight
	dst.Paused = dst.Paused || src.Paused
	dst.OldestReady = max(dst.OldestReady, src.OldestReady)
	dst.DelayedPastDue = max(dst.DelayedPastDue, src.DelayedPastDue)
	dst.Work = dst.Work.add(src.Work)
}

func constHistogram(desc *prometheus.Desc, h Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b] = h.Counts[i]
	}
	return prometheus.MustNewConstHistogram(desc, h.Count, h.Sum, buckets)
}
