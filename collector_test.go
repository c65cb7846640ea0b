package walq

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// busyQueue runs a known sequence of operations that gives each counter of
// Stats, and each item state, a different value, so that a collector
// reading the wrong field shows.
func busyQueue(t *testing.T) (*Queue, *ManualClock) {
	t.Helper()
	q, clock, _ := testQueue(t, Options{MaxAttempts: 10, Visibility: 10 * time.Second, KeyWindow: time.Hour})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// 6 acked, then 5 late acks with their old receipts.
	var receipts []Receipt
	for range 6 {
		mustPut(t, q, "acked")
		m := mustTryGet(t, q)
		must(q.Ack(m.Receipt))
		receipts = append(receipts, m.Receipt)
	}
	for _, r := range receipts[:5] {
		if err := q.Ack(r); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("late ack: %v", err)
		}
	}
	// 7 nacks of one item, each followed by its 1s backoff.
	mustPut(t, q, "nacked")
	for range 7 {
		must(q.Nack(mustTryGet(t, q).Receipt, errors.New("try later")))
		advance(t, q, clock, time.Second)
	}
	// 8 dead-lettered; 1 of them redriven, 3 purged.
	var dead []uint64
	for range 8 {
		dead = append(dead, mustPut(t, q, "dead"))
	}
	for range 9 { // the nacked item is first in line; its lease will run out
		m := mustTryGet(t, q)
		if string(m.Body) == "dead" {
			must(q.DeadLetter(m.Receipt, errors.New("never")))
		}
	}
	must(q.Redrive(dead[0]))
	must(q.PurgeDeadLetters(dead[2:5]...))
	// 4 discarded at their deadline, 1 more lease run out, 1 delayed for an
	// hour; a key held.
	for range 4 {
		mustPut(t, q, "discarded", WithDeadline(clock.Now().Add(30*time.Second)))
	}
	mustPut(t, q, "expires", WithKey("k"), WithPriority(-1))
	mustTryGet(t, q)
	mustPut(t, q, "delayed", WithDelay(time.Hour))
	advance(t, q, clock, 30*time.Second) // both leases and the deadlines pass
	// No consumer for 5s more: the redriven item waits, ready, and the
	// expired ones, back after a 1s backoff, came due 4s ago: ready too,
	// with no consumer to look (only the hour's delay is delayed).
	advance(t, q, clock, 5*time.Second)
	must(q.Compact())
	q.rt.work.handlerErrors.Add(1)
	q.rt.work.panics.Add(2)
	q.rt.work.timeouts.Add(3)
	q.rt.work.abandoned.Add(4)
	q.rt.work.abandonedRunning.Add(5)
	q.rt.work.leaseLost.Add(6)
	return q, clock
}

func TestCollectorLintsClean(t *testing.T) {
	q, _ := busyQueue(t)
	c := NewCollector(q, "jobs")
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	// Two queues on one pedantic registry: consistent descriptions, no
	// clash between their series.
	other, _, _ := testQueue(t, Options{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c, NewCollector(other, "mail"))
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("pedantic gather: %v", err)
	}
	for _, f := range families {
		if got := len(f.GetMetric()); got != 2 && f.GetName() != "walq_items" {
			t.Errorf("%s: %d series, want one per queue", f.GetName(), got)
		}
	}
}

func TestCollectorMatchesStats(t *testing.T) {
	q, _ := busyQueue(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(q, "jobs"))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	st := q.Stats() // nothing runs meanwhile: the scrape saw the same figures

	// The known sequence, as Stats reports it.
	if st.Put != 21 || st.Delivered != 23 || st.Acked != 6 || st.Nacked != 7 || st.Expired != 2 ||
		st.DeadLettered != 8 || st.Discarded != 4 || st.Redriven != 1 || st.Purged != 3 || st.LateAcks != 5 ||
		st.Ready != 3 || st.Delayed != 1 || st.Leased != 0 || st.Dead != 4 || st.Keys != 1 ||
		st.Bytes != 40 || st.OldestReady != 35*time.Second || st.DelayedPastDue != 0 ||
		st.Compactions != 1 || st.Fsync.Count == 0 || st.CommitBatch.Count == 0 {
		t.Fatalf("the sequence left %+v", st)
	}

	want := map[string]float64{
		`walq_items{state="ready"}`:                     float64(st.Ready),
		`walq_items{state="delayed"}`:                   float64(st.Delayed),
		`walq_items{state="leased"}`:                    float64(st.Leased),
		`walq_items{state="dead"}`:                      float64(st.Dead),
		"walq_stored_bytes":                             float64(st.Bytes),
		"walq_keys":                                     float64(st.Keys),
		"walq_put_total":                                float64(st.Put),
		"walq_delivered_total":                          float64(st.Delivered),
		"walq_acked_total":                              float64(st.Acked),
		"walq_nacked_total":                             float64(st.Nacked),
		"walq_leases_expired_total":                     float64(st.Expired),
		"walq_dead_lettered_total":                      float64(st.DeadLettered),
		"walq_discarded_total":                          float64(st.Discarded),
		"walq_redriven_total":                           float64(st.Redriven),
		"walq_purged_total":                             float64(st.Purged),
		"walq_late_acks_total":                          float64(st.LateAcks),
		`walq_oldest_ready_age_seconds{paused="false"}`: st.OldestReady.Seconds(),
		"walq_moved_in_total":                           0,
		"walq_moved_out_total":                          0,
		"walq_paused":                                   0,
		"walq_max_in_flight":                            0,
		"walq_delayed_past_due_seconds":                 st.DelayedPastDue.Seconds(),
		"walq_log_bytes":                                float64(st.LogBytes),
		"walq_log_segments":                             float64(st.LogSegments),
		"walq_live_bytes":                               float64(st.LiveBytes),
		"walq_compactions_total":                        float64(st.Compactions),
		"walq_compactions_failed_total":                 float64(st.CompactionsFailed),
		"walq_last_compaction_timestamp_seconds":        float64(st.LastCompacted.UnixNano()) / 1e9,
		"walq_last_compaction_duration_seconds":         st.LastCompactIn.Seconds(),
		"walq_recovery_duration_seconds":                st.Recovery.Duration.Seconds(),
		"walq_work_handler_errors_total":                1,
		"walq_work_handler_panics_total":                2,
		"walq_work_handler_timeouts_total":              3,
		"walq_work_handlers_abandoned_total":            4,
		"walq_work_abandoned_handlers_running":          5,
		"walq_work_leases_lost_total":                   6,
		"walq_fsync_duration_seconds_count":             float64(st.Fsync.Count),
		"walq_fsync_duration_seconds_sum":               st.Fsync.Sum,
		"walq_commit_batch_records_count":               float64(st.CommitBatch.Count),
		"walq_commit_batch_records_sum":                 st.CommitBatch.Sum,
		"walq_body_cache_hits_total":                    float64(st.Bodies.Hits),
		"walq_body_cache_misses_total":                  float64(st.Bodies.Misses),
		"walq_body_cache_bytes":                         float64(st.Bodies.CacheBytes + st.Bodies.UnplacedBytes),
		"walq_body_read_bytes_total":                    float64(st.Bodies.ReadBytes),
		"walq_body_failures_total":                      float64(st.Bodies.Failures),
		"walq_relocated_bytes_total":                    float64(st.Bodies.RelocatedBytes),
		"walq_compaction_copies_skipped_total":          float64(st.CopiesSkipped),
		"walq_puts_refused_disk_total":                  float64(st.DiskRefused),
		"walq_segment_rolls_put_off_total":              float64(st.RollsPutOff),
		"walq_segments_unreserved_total":                float64(st.UnreservedSegments),
	}
	for name, h := range map[string]Histogram{"walq_fsync_duration_seconds": st.Fsync, "walq_commit_batch_records": st.CommitBatch} {
		for i, bound := range h.Bounds {
			want[name+`_bucket{le="`+formatBound(bound)+`"}`] = float64(h.Counts[i])
		}
	}
	got := scraped(t, families)
	// The disk's free space is read at each scrape, and the disk is
	// shared: it is only checked to be read.
	if g, ok := got["walq_disk_free_bytes"]; !ok || g <= 0 || st.DiskFree <= 0 {
		t.Errorf("walq_disk_free_bytes = %v (scraped %v), Stats.DiskFree %d", g, ok, st.DiskFree)
	}
	want["walq_disk_free_bytes"] = got["walq_disk_free_bytes"]
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s not scraped", name)
		} else if g != w {
			t.Errorf("%s = %v, Stats says %v", name, g, w)
		}
	}
	var extra []string
	for name := range got {
		if _, ok := want[name]; !ok {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("scraped but not checked against Stats: %v", extra)
	}
}

// dirMetrics are the series of the directory, which carry no queue label.
var dirMetrics = map[string]bool{
	"walq_fsync_duration_seconds": true, "walq_commit_batch_records": true, "walq_log_bytes": true,
	"walq_log_segments": true, "walq_live_bytes": true, "walq_compactions_total": true,
	"walq_compactions_failed_total": true, "walq_last_compaction_timestamp_seconds": true,
	"walq_last_compaction_duration_seconds": true, "walq_recovery_duration_seconds": true,
	"walq_body_cache_hits_total": true, "walq_body_cache_misses_total": true, "walq_body_cache_bytes": true,
	"walq_body_read_bytes_total": true, "walq_body_failures_total": true, "walq_relocated_bytes_total": true,
	"walq_compaction_copies_skipped_total": true, "walq_disk_free_bytes": true, "walq_puts_refused_disk_total": true,
	"walq_segment_rolls_put_off_total": true, "walq_segments_unreserved_total": true,
}

// scraped flattens gathered families into name{labels} -> value, with
// histograms as _count, _sum and _bucket{le} series. It checks that every
// series carries dir="jobs", and a queue label when it is a queue's, and
// leaves dir out of the key, and queue too when it is "(default)".
func scraped(t *testing.T, families []*dto.MetricFamily) map[string]float64 {
	t.Helper()
	out := make(map[string]float64)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			dir, queue := "", ""
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "dir":
					dir = l.GetValue()
					continue
				case "queue":
					queue = l.GetValue()
					if queue == "(default)" {
						continue
					}
				}
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			if dir != "jobs" {
				t.Errorf("%s: dir label %q", f.GetName(), dir)
			}
			if (queue == "") != dirMetrics[f.GetName()] {
				t.Errorf("%s: queue label %q", f.GetName(), queue)
			}
			key := func(name string, extra ...string) string {
				all := append(append([]string(nil), labels...), extra...)
				if len(all) == 0 {
					return name
				}
				return name + "{" + strings.Join(all, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_GAUGE:
				out[key(f.GetName())] = m.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				out[key(f.GetName())] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[key(f.GetName()+"_count")] = float64(h.GetSampleCount())
				out[key(f.GetName()+"_sum")] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					out[key(f.GetName()+"_bucket", `le="`+formatBound(b.GetUpperBound())+`"`)] = float64(b.GetCumulativeCount())
				}
			default:
				t.Errorf("%s: unexpected type %v", f.GetName(), f.GetType())
			}
		}
	}
	return out
}

func formatBound(b float64) string { return strconv.FormatFloat(b, 'g', -1, 64) }

// TestCollectorNamedQueues: one collector shows every queue of the
// directory under its queue label, a paused queue's waiting items under
// paused="true" with their age, and drops a deleted queue's series.
func TestCollectorNamedQueues(t *testing.T) {
	q, clock, _ := testQueue(t, Options{})
	mail, err := q.OpenQueue("mail", QueueOptions{MaxInFlight: 4})
	must(t, err)
	held, err := q.OpenQueue("held", QueueOptions{})
	must(t, err)
	must(t, held.Pause(time.Time{}))
	mustPut(t, held, "waits behind the pause")
	mustPut(t, mail, "m")
	clock.Advance(time.Minute)
	c := NewCollector(q, "jobs")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	must(t, err)
	got := scraped(t, families)
	for name, want := range map[string]float64{
		`walq_paused{queue="held"}`:                                 1,
		`walq_paused{queue="mail"}`:                                 0,
		`walq_max_in_flight{queue="mail"}`:                          4,
		`walq_oldest_ready_age_seconds{paused="true",queue="held"}`: 60,
		`walq_put_total{queue="held"}`:                              1,
		`walq_put_total{queue="mail"}`:                              1,
		`walq_put_total`:                                            0, // the default queue
		`walq_log_segments`:                                         1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	must(t, held.Delete(false))
	families, err = reg.Gather()
	must(t, err)
	for name := range scraped(t, families) {
		if strings.Contains(name, `queue="held"`) {
			t.Errorf("%s scraped after its queue was deleted", name)
		}
	}
}

// TestCollectorBoundsQueues: with many queues, the default queue, the
// named ones and the top N by backlog get series of their own, and the
// rest are summed into queue="(other)": nothing is left out of the sums.
func TestCollectorBoundsQueues(t *testing.T) {
	q, _, _ := testQueue(t, Options{Sync: SyncNever})
	createQueues(t, q, 300)
	// tenant-00010 .. tenant-00014 hold 10..14 items; tenant-00100 holds
	// one (named); tenant-00200 .. tenant-00209 hold one each (summed).
	put := func(name string, n int) {
		h := mustOpenQueue(t, q, name, QueueOptions{})
		for range n {
			mustPut(t, h, "x")
		}
	}
	for i := range 5 {
		put(fmt.Sprintf("tenant-%05d", 10+i), 10+i)
	}
	put("tenant-00100", 1)
	for i := range 10 {
		put(fmt.Sprintf("tenant-%05d", 200+i), 1)
	}
	mustPut(t, q, "default")

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(q, "jobs", CollectorQueues("tenant-00100"), CollectorTopN(5)))
	families, err := reg.Gather()
	must(t, err)
	got := scraped(t, families)
	queues := make(map[string]bool)
	for name := range got {
		if i := strings.Index(name, `queue="`); i >= 0 {
			queues[strings.SplitN(name[i+7:], `"`, 2)[0]] = true
		}
	}
	want := []string{"(other)", "tenant-00010", "tenant-00011", "tenant-00012", "tenant-00013", "tenant-00014", "tenant-00100"}
	var have []string
	for name := range queues {
		have = append(have, name)
	}
	sort.Strings(have)
	if strings.Join(have, " ") != strings.Join(want, " ") {
		t.Fatalf("queues with series of their own: %v, want %v (and the default queue)", have, want)
	}
	for name, want := range map[string]float64{
		`walq_items{queue="(other)",state="ready"}`:      10,
		`walq_put_total{queue="(other)"}`:                10,
		`walq_items{queue="tenant-00014",state="ready"}`: 14,
		`walq_items{queue="tenant-00100",state="ready"}`: 1,
		`walq_items{state="ready"}`:                      1, // the default queue
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}
