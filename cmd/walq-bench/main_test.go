package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq/internal/testrule"
)

// bench runs walq-bench with -json in a temporary directory and decodes
// its result. Calibration is off unless a case asks for it.
func bench(t *testing.T, args ...string) *Result {
	t.Helper()
	args = append([]string{"-json", "-dir", t.TempDir(), "-calibrate=false"}, args...)
	var out bytes.Buffer
	if err := runWith(args, &out, io.Discard); err != nil {
		t.Fatalf("walq-bench %s: %v", strings.Join(args, " "), err)
	}
	var r Result
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("walq-bench %s: output does not parse: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return &r
}

func TestWorkloads(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, r *Result)
	}{
		{"put", []string{"put", "-n", "200", "-producers", "4"}, func(t *testing.T, r *Result) {
			run := r.Run
			if run.Puts != 200 || run.Items != 200 || run.Gets != 0 || run.Acks != 0 {
				t.Errorf("puts %d items %d gets %d acks %d, want 200 200 0 0", run.Puts, run.Items, run.Gets, run.Acks)
			}
			if run.Records != 200 || run.Backlog != 200 {
				t.Errorf("records %d backlog %d, want 200 200", run.Records, run.Backlog)
			}
			if run.Fsyncs == 0 || run.Batches == 0 || run.AvgBatch < 1 {
				t.Errorf("SyncAlways: fsyncs %d batches %d avg batch %v", run.Fsyncs, run.Batches, run.AvgBatch)
			}
			if l := run.Latency["put"]; l.Count != 200 || !(0 < l.P50Us && l.P50Us <= l.P99Us && l.P99Us <= l.P999Us && l.P999Us <= l.MaxUs) {
				t.Errorf("put latency %+v", l)
			}
			if run.CPUSeconds <= 0 || run.PeakHeapInuse == 0 || run.MaxRSS == 0 {
				t.Errorf("cpu %v peak heap %d max rss %d", run.CPUSeconds, run.PeakHeapInuse, run.MaxRSS)
			}
		}},
		{"cycle plain", []string{"cycle", "-n", "200", "-producers", "4", "-consumers", "4", "-consumer", "plain"}, checkCycle(200)},
		{"cycle work", []string{"cycle", "-n", "200", "-producers", "4", "-consumers", "4", "-consumer", "work"}, checkCycle(200)},
		{"cycle queues", []string{"cycle", "-n", "203", "-queues", "3", "-producers", "2", "-consumers", "2"}, func(t *testing.T, r *Result) {
			checkCycle(203)(t, r)
			if r.Config.Queues != 3 {
				t.Errorf("config reports %d queues", r.Config.Queues)
			}
		}},
		{"put queues", []string{"put", "-n", "100", "-queues", "4", "-producers", "1", "-sync", "never"}, func(t *testing.T, r *Result) {
			if r.Run.Puts != 100 || r.Run.Backlog != 100 {
				t.Errorf("puts %d backlog %d over 4 queues, want 100 100", r.Run.Puts, r.Run.Backlog)
			}
		}},
		{"cycle bounded", []string{"cycle", "-n", "200", "-producers", "4", "-consumers", "4", "-max-ready", "5", "-sync", "never"}, checkCycle(200)},
		{"cycle small body", []string{"cycle", "-n", "100", "-producers", "2", "-consumers", "2", "-body", "0", "-sync", "never"}, func(t *testing.T, r *Result) {
			if r.Run.Puts != 100 || r.Run.Acks != 100 {
				t.Errorf("puts %d acks %d, want 100", r.Run.Puts, r.Run.Acks)
			}
			if n := r.Run.Latency["e2e"].Count; n != 0 {
				t.Errorf("%d end-to-end latencies from bodies too short to carry a stamp", n)
			}
		}},
	} {
		runWorkload(t, tc.name, tc.args, tc.check)
	}
}

// TestDurationWorkloads runs the put and cycle workloads bounded by a
// duration rather than a count (apart, to keep each test within the
// default run's limit).
func TestDurationWorkloads(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, r *Result)
	}{
		{"cycle bounded duration", []string{"cycle", "-duration", "150ms", "-producers", "4", "-consumers", "2", "-max-ready", "3", "-sync", "never", "-consumer", "plain"}, func(t *testing.T, r *Result) {
			// A producer takes one of 3 slots before it puts; a delivery
			// frees one.
			if run := r.Run; run.Puts == 0 || run.Puts > run.Gets+3 {
				t.Errorf("puts %d, gets %d: the bound of 3 did not hold", run.Puts, run.Gets)
			}
		}},
		{"cycle duration", []string{"cycle", "-duration", "200ms", "-producers", "2", "-consumers", "2", "-sync", "interval:5ms", "-consumer", "plain"}, func(t *testing.T, r *Result) {
			run := r.Run
			if run.Puts == 0 || run.Acks == 0 || run.Acks > run.Puts || run.Gets < run.Acks {
				t.Errorf("puts %d gets %d acks %d", run.Puts, run.Gets, run.Acks)
			}
			if uint64(run.Backlog) != run.Puts-run.Acks {
				t.Errorf("backlog %d, want puts−acks %d", run.Backlog, run.Puts-run.Acks)
			}
			if run.Seconds < 0.2 {
				t.Errorf("ran %vs, asked for 0.2s", run.Seconds)
			}
		}},
	} {
		runWorkload(t, tc.name, tc.args, tc.check)
	}
}

// TestOtherWorkloads runs the workloads that are neither put nor cycle
// (apart from TestWorkloads, so that each test stays within the default
// run's limit).
func TestOtherWorkloads(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, r *Result)
	}{
		{"delay plain", []string{"delay", "-n", "200", "-delay-max", "20ms", "-sync", "never", "-consumer", "plain"}, checkDelay(200)},
		{"delay work", []string{"delay", "-n", "200", "-delay-max", "20ms", "-sync", "never", "-consumer", "work"}, checkDelay(200)},
		{"recover from log", []string{"recover", "-n", "300", "-body", "32", "-sync", "never", "-producers", "4"}, func(t *testing.T, r *Result) {
			rc := r.Recover
			if rc.Recovered != 300 || rc.Replayed < 300 || rc.SnapshotLSN != 0 || rc.FromSnapshot {
				t.Errorf("recovered %d, replayed %d, snapshot %d, from snapshot %v: want 300 items from the log alone",
					rc.Recovered, rc.Replayed, rc.SnapshotLSN, rc.FromSnapshot)
			}
			if rc.ReadySeconds <= 0 || rc.ReadySeconds < rc.OpenSeconds || rc.Disk.LogBytes == 0 || rc.Disk.SnapshotBytes != 0 {
				t.Errorf("ready %v open %v disk %+v", rc.ReadySeconds, rc.OpenSeconds, rc.Disk)
			}
		}},
		{"recover from snapshot", []string{"recover", "-n", "300", "-body", "32", "-from-snapshot", "-batch", "7"}, func(t *testing.T, r *Result) {
			rc := r.Recover
			if rc.Recovered != 300 || rc.SnapshotLSN == 0 || !rc.FromSnapshot || rc.Disk.SnapshotBytes == 0 {
				t.Errorf("recovered %d, snapshot %d, disk %+v: want 300 items from a snapshot", rc.Recovered, rc.SnapshotLSN, rc.Disk)
			}
			// 300 items in batches of 7 are 43 put records, all in the
			// snapshot: the log's tail segment holds nothing after it.
			if rc.Replayed != 0 {
				t.Errorf("replayed %d records after the snapshot, want 0", rc.Replayed)
			}
		}},
		{"compact", []string{"compact", "-duration", "150ms", "-prefill", "300", "-producers", "2", "-consumers", "2", "-segment-size", "8192", "-sync", "never"}, func(t *testing.T, r *Result) {
			cp := r.Compact
			if cp.Without == nil || cp.With == nil || cp.Without.Puts == 0 || cp.With.Puts == 0 {
				t.Fatalf("phases %+v %+v", cp.Without, cp.With)
			}
			if cp.Compactions < 1 || cp.CompactMaxS <= 0 || cp.P99Ratio <= 0 {
				t.Errorf("compactions %d max %v p99 ratio %v", cp.Compactions, cp.CompactMaxS, cp.P99Ratio)
			}
			if cp.DiskAfter.SnapshotBytes == 0 || cp.LiveAfter == 0 || cp.LimitAfter != 2*cp.LiveAfter+2*8192 {
				t.Errorf("disk after %+v live %d limit %d", cp.DiskAfter, cp.LiveAfter, cp.LimitAfter)
			}
		}},
		{"mem", []string{"mem", "-n", "2000", "-body", "64", "-sync", "never", "-batch", "50"}, func(t *testing.T, r *Result) {
			m := r.Mem
			if m.Items != 2000 || m.HeapInuse == 0 || m.HeapObjects == 0 || math.IsNaN(m.PerItem) {
				t.Errorf("%+v", m)
			}
		}},
		{"calibrated put", []string{"put", "-n", "50", "-producers", "2", "-calibrate", "-calibrate-time", "30ms"}, func(t *testing.T, r *Result) {
			c := r.Calibration
			if c == nil || c.Serial.Writers != 1 || c.Group.Writers != 2 || c.Serial.Appends == 0 || c.Group.Appends == 0 {
				t.Fatalf("calibration %+v", c)
			}
			if c.Serial.Fsyncs != c.Serial.Appends || c.Serial.Fsync.P50Us <= 0 {
				t.Errorf("serial run: %d appends, %d fsyncs, p50 %v µs: want one fsync per append", c.Serial.Appends, c.Serial.Fsyncs, c.Serial.Fsync.P50Us)
			}
			if r.Ceiling == nil || r.Ceiling.RecordsRatio <= 0 || r.Ceiling.RecordsPerItem != 1 {
				t.Errorf("ceiling %+v", r.Ceiling)
			}
		}},
	} {
		runWorkload(t, tc.name, tc.args, tc.check)
	}
}

// runWorkload runs walq-bench with args as a parallel subtest of t and
// checks its result.
func runWorkload(t *testing.T, name string, args []string, check func(t *testing.T, r *Result)) {
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		r := bench(t, args...)
		if r.Workload != args[0] {
			t.Errorf("workload %q, want %q", r.Workload, args[0])
		}
		check(t, r)
	})
}

func checkCycle(n uint64) func(t *testing.T, r *Result) {
	return func(t *testing.T, r *Result) {
		run := r.Run
		if run.Puts != n || run.Gets != n || run.Acks != n || run.Items != n {
			t.Errorf("puts %d gets %d acks %d items %d, want %d each", run.Puts, run.Gets, run.Acks, run.Items, n)
		}
		if run.Backlog != 0 {
			t.Errorf("backlog %d after all were acked", run.Backlog)
		}
		if run.Records != 3*n {
			t.Errorf("%d records, want 3 per item (put, lease, ack): %d", run.Records, 3*n)
		}
		if l := run.Latency["e2e"]; l.Count != n {
			t.Errorf("%d end-to-end latencies, want %d", l.Count, n)
		}
		if r.Config.Consumer == "plain" && (run.Latency["get"].Count != n || run.Latency["ack"].Count != n) {
			t.Errorf("plain path: get %d ack %d latencies, want %d", run.Latency["get"].Count, run.Latency["ack"].Count, n)
		}
	}
}

func checkDelay(n uint64) func(t *testing.T, r *Result) {
	return func(t *testing.T, r *Result) {
		d := r.Delay
		if d == nil {
			t.Fatal("no delay section")
		}
		if d.Items != n || d.Delivered != n || d.Lateness.Count != n {
			t.Errorf("items %d delivered %d lateness count %d, want %d", d.Items, d.Delivered, d.Lateness.Count, n)
		}
		if d.Early != 0 || d.MinLatenessUs < 0 {
			t.Errorf("%d early deliveries (min lateness %v µs)", d.Early, d.MinLatenessUs)
		}
		if r.Run.Acks != n {
			t.Errorf("acks %d, want %d", r.Run.Acks, n)
		}
	}
}

func TestProfilesAndText(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "mem.pprof")
	var out bytes.Buffer
	args := []string{"cycle", "-dir", dir, "-n", "100", "-producers", "2", "-consumers", "2", "-sync", "never",
		"-calibrate", "-calibrate-time", "20ms", "-cpuprofile", cpu, "-memprofile", mem}
	if err := runWith(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"disk ceiling", "result:", "latency", "e2e", "fsyncs", "vs ceiling", "cpu", "peak heap"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, out.String())
		}
	}
	for _, f := range []string{cpu, mem} {
		if info, err := os.Stat(f); err != nil || info.Size() == 0 {
			t.Errorf("profile %s: %v", f, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "walq-bench-") {
			t.Errorf("%s left behind without -keep", e.Name())
		}
	}
}

func TestKeep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := bench(t, "put", "-dir", dir, "-n", "10", "-sync", "never", "-keep")
	if _, err := os.Stat(filepath.Join(r.Config.Dir, "log")); err != nil {
		t.Errorf("-keep: %v", err)
	}
}

func TestBadArguments(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"nosuch"},
		{"put", "-n", "10", "-duration", "1s"},
		{"cycle", "-consumer", "other"},
		{"put", "-sync", "sometimes"},
		{"put", "-sync", "interval:0s"},
		{"delay", "-body", "8"},
		{"put", "extra"},
		{"cycle", "-producers", "0"},
		{"cycle", "-queues", "0"},
		{"recover", "-queues", "2"},
	} {
		err := runWith(args, io.Discard, io.Discard)
		var ue usageError
		if err == nil || !errors.As(err, &ue) {
			t.Errorf("walq-bench %q: err %v, want a usage error", args, err)
		}
	}
}

func TestWorkloadAfterFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseArgs([]string{"-producers", "3", "delay", "-n", "5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.workload != "delay" || cfg.producers != 3 || cfg.n != 5 || cfg.consumers != 4 || cfg.calibrate {
		t.Errorf("%+v", cfg)
	}
}

// TestHistQuantiles checks the histogram against exact quantiles of sorted
// samples: within the bucket precision (1/128 either side) everywhere.
func TestHistQuantiles(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	h := newHist()
	var samples []time.Duration
	for range 100000 {
		// Log-uniform from 1 ns to 10 s: every scale of the histogram.
		d := time.Duration(math.Exp(rng.Float64() * math.Log(1e10)))
		samples = append(samples, d)
		h.record(d)
	}
	slices.Sort(samples)
	for _, q := range []float64{0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 1} {
		want := samples[int(math.Ceil(q*float64(len(samples))))-1]
		got := h.quantile(q)
		if math.Abs(float64(got-want)) > float64(want)/128+1 {
			t.Errorf("q%v: %v, want %v ±%.2f%%", q, got, want, 100.0/128)
		}
	}
	if time.Duration(h.max) != samples[len(samples)-1] || time.Duration(h.min) != samples[0] {
		t.Errorf("min %v max %v, want %v %v", h.min, h.max, samples[0], samples[len(samples)-1])
	}
	for v := uint64(0); v < 1<<20; v = v*17/16 + 1 {
		i := histIndex(v)
		if mid := histMid(i); math.Abs(mid-float64(v)) > float64(v)/128+0.5 {
			t.Fatalf("value %d: bucket %d middle %v", v, i, mid)
		}
		if i > 0 && histIndex(v) < histIndex(v-1) {
			t.Fatalf("index not monotonic at %d", v)
		}
	}
	if i := histIndex(math.MaxInt64); i >= histBuckets {
		t.Errorf("largest value in bucket %d of %d", i, histBuckets)
	}
}

// TestColdGet runs the coldget workload small: every kept item is read
// from disk (no body cache), none is left, and both figures are there.
func TestColdGet(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("coldget drops the page cache with posix_fadvise, on Linux only")
	}
	t.Parallel()
	r := bench(t, "coldget", "-n", "2000", "-body", "4096", "-batch", "50", "-sync", "never")
	cg := r.ColdGet
	if cg == nil {
		t.Fatal("no coldget section")
	}
	if cg.Items != 2000 || cg.Gets != 100 || cg.Misses != 100 {
		t.Errorf("items %d gets %d misses %d, want 2000 100 100", cg.Items, cg.Gets, cg.Misses)
	}
	if !(0 < cg.GetP50Us && cg.GetP50Us <= cg.GetP99Us && 0 < cg.ReadP50Us && cg.ReadP50Us <= cg.ReadP99Us && cg.Ratio > 0) {
		t.Errorf("figures %+v", cg)
	}
	if cg.DiskBytes < 2000*4096 {
		t.Errorf("%d bytes on disk for 2000 bodies of 4 KiB", cg.DiskBytes)
	}
}

// TestMain holds every test of the package to the default run's time limit;
// the test binary is also the process that recover's killed case starts.
func TestMain(m *testing.M) {
	if leaseChild() {
		return
	}
	testrule.Main(m)
}

// The idle workload measures a directory of queues with Gets blocked and
// nothing to do: its loops do not wake, and every Get still waits.
func TestIdle(t *testing.T) {
	r := bench(t, "-queues", "40", "-duration", "200ms", "-sync", "never", "idle")
	id := r.Idle
	if id == nil || id.Queues != 40 || id.Waiting != 40 {
		t.Fatalf("idle result %+v", id)
	}
	if id.TimerLoop > 2 || id.Committer != 0 {
		t.Fatalf("an idle directory woke: timer loop %d, committer %d", id.TimerLoop, id.Committer)
	}
}

// Each case of recover leaves the directory as it says, and the reopen
// finds every item.
func TestRecoverCases(t *testing.T) {
	for _, c := range recoverCases {
		t.Run(c, func(t *testing.T) {
			r := bench(t, "-n", "1000", "-batch", "100", "-sync", "never", "-from-snapshot", "-recover-case", c, "recover").Recover
			if r == nil || r.Case != c {
				t.Fatalf("result %+v", r)
			}
			want := int64(0)
			if c != "pristine" {
				want = 10
			}
			if r.Touched != want || r.ReadySeconds < r.FirstGetSeconds || r.FirstGetSeconds <= 0 {
				t.Fatalf("%s: touched %d (want %d), ready %v, first get %v", c, r.Touched, want, r.ReadySeconds, r.FirstGetSeconds)
			}
		})
	}
}
