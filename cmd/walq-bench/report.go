package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/walq/walq"
)

// Result is everything one run measured; -json prints it as it is.
type Result struct {
	Workload    string         `json:"workload"`
	Config      ConfigReport   `json:"config"`
	Machine     Machine        `json:"machine"`
	Calibration *Calibration   `json:"calibration,omitempty"`
	Run         *RunResult     `json:"run,omitempty"`
	Ceiling     *Ceiling       `json:"ceiling,omitempty"`
	Delay       *DelayResult   `json:"delay,omitempty"`
	Recover     *RecoverResult `json:"recover,omitempty"`
	Compact     *CompactResult `json:"compact,omitempty"`
	Mem         *MemResult     `json:"mem,omitempty"`
	ColdGet     *ColdGetResult `json:"coldget,omitempty"`
	Scale       *ScaleResult   `json:"scale,omitempty"`
	Idle        *IdleResult    `json:"idle,omitempty"`
	Notes       []string       `json:"notes,omitempty"`
}

// ConfigReport is the run's configuration as it ran.
type ConfigReport struct {
	Queues          int     `json:"queues,omitempty"` // named queues, each with Producers and Consumers; 0: the default queue
	Producers       int     `json:"producers"`
	Consumers       int     `json:"consumers"`
	Consumer        string  `json:"consumer"`
	BodyBytes       int     `json:"body_bytes"`
	N               int64   `json:"n,omitempty"`
	DurationSeconds float64 `json:"duration_seconds,omitempty"`
	Sync            string  `json:"sync"`
	SegmentBytes    int64   `json:"segment_bytes"`
	MaxReady        int     `json:"max_ready,omitempty"`
	Dir             string  `json:"dir"`
	Args            string  `json:"args"` // the command line, for running it again
}

func (c *config) report(qdir string) ConfigReport {
	r := ConfigReport{
		Producers:       c.producers,
		Consumers:       c.consumers,
		Consumer:        c.consumer,
		BodyBytes:       c.body,
		N:               c.n,
		DurationSeconds: c.duration.Seconds(),
		Sync:            c.sync.String(),
		SegmentBytes:    c.segmentBytes(),
		MaxReady:        c.maxReady,
		Dir:             qdir,
	}
	if c.queues > 1 {
		r.Queues = c.queues
	}
	switch c.workload {
	case "put", "recover", "mem":
		r.Consumers, r.Consumer = 0, ""
	}
	return r
}

// Machine describes where the run ran.
type Machine struct {
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Go         string `json:"go"`
	FSType     string `json:"fs_type,omitempty"`
	// LoadAvg is /proc/loadavg's 1, 5 and 15 minute figures at the start:
	// other work on the machine shows in every figure here.
	LoadAvg string `json:"load_avg,omitempty"`
}

func machine(dir string) Machine {
	m := Machine{
		OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version(), FSType: fsType(dir),
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// Ceiling sets walq's figures beside the calibrated disk.
type Ceiling struct {
	Writers             int     `json:"writers"`
	AppendsPerSec       float64 `json:"appends_per_sec"` // the group run: Writers sharing each fsync
	SerialAppendsPerSec float64 `json:"serial_appends_per_sec"`
	SerialFsyncP50Us    float64 `json:"serial_fsync_p50_us"`
	// RecordsRatio is walq's log records per second over the group
	// ceiling's appends per second.
	RecordsRatio float64 `json:"records_ratio"`
	// RecordsPerItem is what an item costs in log records: 1 for put
	// (the put), 3 for cycle (put, lease, ack). ItemsRatio is items per
	// second over AppendsPerSec / RecordsPerItem.
	RecordsPerItem int     `json:"records_per_item"`
	ItemsRatio     float64 `json:"items_ratio"`
	// PutP50OverFsyncUs is put p50 minus the serial fsync p50: what walq
	// adds to the disk's own latency.
	PutP50OverFsyncUs float64 `json:"put_p50_over_fsync_us"`
}

// judge relates the run to the calibration.
func (r *Result) judge(cfg *config) {
	if r.Calibration == nil || r.Run == nil {
		return
	}
	c := r.Calibration
	ce := &Ceiling{
		Writers:             c.Group.Writers,
		AppendsPerSec:       c.Group.AppendsPerSec,
		SerialAppendsPerSec: c.Serial.AppendsPerSec,
		SerialFsyncP50Us:    c.Serial.Fsync.P50Us,
		RecordsPerItem:      3,
	}
	if cfg.workload == "put" {
		ce.RecordsPerItem = 1
	}
	if ce.AppendsPerSec > 0 {
		ce.RecordsRatio = r.Run.RecordsPerSec / ce.AppendsPerSec
		ce.ItemsRatio = r.Run.ItemsPerSec / (ce.AppendsPerSec / float64(ce.RecordsPerItem))
	}
	ce.PutP50OverFsyncUs = r.Run.Latency["put"].P50Us - c.Serial.Fsync.P50Us
	r.Ceiling = ce
	if cfg.sync != walq.SyncAlways {
		r.Notes = append(r.Notes, "the ceiling is for fsynced appends; under "+cfg.sync.String()+" walq does not fsync each batch")
	}
}

func (r *Result) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func (r *Result) writeText(w io.Writer) error {
	p := &printer{w: w}
	c := r.Config
	head := fmt.Sprintf("walq-bench %s: %d producers", r.Workload, c.Producers)
	if c.Consumers > 0 {
		head += fmt.Sprintf(", %d consumers (%s)", c.Consumers, c.Consumer)
	}
	if c.Queues > 1 {
		head = fmt.Sprintf("walq-bench %s: %d queues, each with %d producers", r.Workload, c.Queues, c.Producers)
		if c.Consumers > 0 {
			head += fmt.Sprintf(" and %d consumers (%s)", c.Consumers, c.Consumer)
		}
	}
	if r.Workload == "idle" {
		head = fmt.Sprintf("walq-bench idle: %d queues, a Get blocked on each", c.Queues)
	}
	head += fmt.Sprintf(", body %d B, sync %s", c.BodyBytes, c.Sync)
	if c.MaxReady > 0 {
		head += fmt.Sprintf(", at most %s put and not delivered", count(float64(c.MaxReady)))
	}
	if c.N > 0 {
		head += ", n " + count(float64(c.N))
	} else {
		head += ", " + time.Duration(c.DurationSeconds*float64(time.Second)).String()
	}
	p.line(head)
	m := r.Machine
	p.line("machine: %s/%s, %d CPUs (GOMAXPROCS %d), %s, load average %s", m.OS, m.Arch, m.CPUs, m.GOMAXPROCS, m.Go, m.LoadAvg)
	p.line("dir: %s (%s), segments of %s", c.Dir, m.FSType, bytesText(float64(c.SegmentBytes)))
	if m.FSType == "tmpfs" {
		p.line("WARNING: tmpfs: fsync costs nothing here; use -dir on the disk you mean to measure")
	}

	if cal := r.Calibration; cal != nil {
		p.line("")
		p.line("disk ceiling: %d-byte records, write then fsync, appended to one growing file", cal.RecordBytes)
		runs := []CalRun{cal.Serial, cal.Group}
		if cal.Group.Writers == 1 {
			runs = runs[:1]
		}
		for _, run := range runs {
			p.line("  %3d writer(s): %10s appends/s  fsync p50 %s p99 %s  %s fsyncs/s, %.1f records each",
				run.Writers, count(run.AppendsPerSec), us(run.Fsync.P50Us), us(run.Fsync.P99Us),
				count(float64(run.Fsyncs)/run.Seconds), run.AvgBatch)
		}
	}
	if run := r.Run; run != nil {
		p.line("")
		p.runText(run, r.Workload)
	}
	if ce := r.Ceiling; ce != nil {
		p.line("vs ceiling: %s records/s = %.2f × the %d-writer ceiling (%s appends/s); items/s = %.2f × ceiling/%d",
			count(r.Run.RecordsPerSec), ce.RecordsRatio, ce.Writers, count(ce.AppendsPerSec), ce.ItemsRatio, ce.RecordsPerItem)
		p.line("            put p50 %s = serial fsync p50 %s %+.1f µs", us(r.Run.Latency["put"].P50Us), us(ce.SerialFsyncP50Us), ce.PutP50OverFsyncUs)
	}
	if d := r.Delay; d != nil {
		p.line("")
		p.line("delay: %s items with delays up to %.0f ms, %s delivered, %d early", count(float64(d.Items)), d.DelayMaxMs, count(float64(d.Delivered)), d.Early)
		p.line("  lateness (delivered − due): p50 %s  p99 %s  p99.9 %s  max %s  min %s",
			us(d.Lateness.P50Us), us(d.Lateness.P99Us), us(d.Lateness.P999Us), us(d.Lateness.MaxUs), us(d.MinLatenessUs))
	}
	if rc := r.Recover; rc != nil {
		p.line("")
		src := "the log alone"
		if rc.FromSnapshot {
			src = "a snapshot (compacted in " + secs(rc.CompactSeconds) + ") and the log after it"
		}
		cache := "warm page cache"
		if rc.Cold {
			cache = "page cache dropped"
		}
		p.line("recover: %s items of %d B from %s, %s", count(float64(rc.Items)), rc.BodyBytes, src, cache)
		p.line("  filled in %s (%s items/s); on disk: log %s in %d segments, snapshot %s",
			secs(rc.FillSeconds), count(float64(rc.Items)/rc.FillSeconds), bytesText(float64(rc.Disk.LogBytes)), rc.Disk.Segments,
			bytesText(float64(rc.Disk.SnapshotBytes)))
		p.line("  ready (Open → first Get): %s   Open %s, recovery %s, %s records replayed, %s items back",
			secs(rc.ReadySeconds), secs(rc.OpenSeconds), secs(rc.RecoverySeconds), count(float64(rc.Replayed)), count(float64(rc.Recovered)))
		p.line("  cpu %s, peak heap in use %s, max RSS %s", secs(rc.CPUSeconds), bytesText(float64(rc.PeakHeapInuse)), bytesText(float64(rc.MaxRSS)))
	}
	if cp := r.Compact; cp != nil {
		p.line("")
		p.line("compact: %s delayed items held as live data", count(float64(cp.Prefill)))
		p.line("without compaction:")
		p.runText(cp.Without, "cycle")
		p.line("with compaction (%d compactions, mean %s, max %s):", cp.Compactions, secs(cp.CompactMeanS), secs(cp.CompactMaxS))
		p.runText(cp.With, "cycle")
		p.line("put p99: %s with / %s without = %.2f×", us(cp.With.Latency["put"].P99Us), us(cp.Without.Latency["put"].P99Us), cp.P99Ratio)
		p.line("disk after: log %s + snapshot %s = %s; live %s; limit 2×live + 2 segments = %s (%.2f of it)",
			bytesText(float64(cp.DiskAfter.LogBytes)), bytesText(float64(cp.DiskAfter.SnapshotBytes)),
			bytesText(float64(cp.DiskAfter.total())), bytesText(float64(cp.LiveAfter)), bytesText(float64(cp.LimitAfter)),
			float64(cp.DiskAfter.total())/float64(cp.LimitAfter))
		p.line("worst after a compaction under load: disk %s, live %s (%.2f of the limit)",
			bytesText(float64(cp.WorstDisk)), bytesText(float64(cp.WorstLive)), cp.WorstOverLimit)
		p.line("write amplification with compaction: %.2f bytes written per byte of body put; %s of bodies copied forward; %s kept out of the log",
			cp.WriteAmp, bytesText(float64(cp.Relocated)), bytesText(float64(cp.Kept)))
	}
	if sc := r.Scale; sc != nil {
		p.line("")
		p.line("scale: %s items of %d B", count(float64(sc.Items)), sc.BodyBytes)
		p.line("  fill %s; on disk %s (log %s, snapshot %s); Close %s", secs(sc.FillSeconds), bytesText(float64(sc.DiskFilled.total())),
			bytesText(float64(sc.DiskFilled.LogBytes)), bytesText(float64(sc.DiskFilled.SnapshotBytes)), secs(sc.CloseSeconds))
		p.line("  recovery (Open) %s", secs(sc.OpenSeconds))
		p.line("  half drained in %s with %d compactions back to back; then on disk %s for %s live",
			secs(sc.HalfSeconds), sc.Compactions, bytesText(float64(sc.DiskHalf.total())), bytesText(float64(sc.LiveHalf)))
		p.line("  drained in %s; then on disk %s", secs(sc.DrainSeconds), bytesText(float64(sc.DiskDrained.total())))
		p.line("  %s of bodies copied forward; %.2f bytes written per byte of body put; max RSS %s",
			bytesText(float64(sc.Relocated)), sc.WriteAmp, bytesText(float64(sc.MaxRSS)))
	}
	if id := r.Idle; id != nil {
		p.line("")
		p.line("idle: %d queues with a Get blocked on each (a quarter paused with an item due, a quarter past a timed pause)", id.Queues)
		p.line("  over %s: CPU %s, %.2f%% of a core; timer loop woke %d times, committer %d; %d Gets waiting",
			secs(id.Seconds), secs(id.CPUSeconds), 100*id.CoreShare, id.TimerLoop, id.Committer, id.Waiting)
	}
	if cg := r.ColdGet; cg != nil {
		p.line("")
		p.line("coldget: %s items of %d B (%s on disk), page cache dropped, no body cache; %d Gets timed across the backlog (%d bodies read from disk)",
			count(float64(cg.Items)), cg.BodyBytes, bytesText(float64(cg.DiskBytes)), cg.Gets, cg.Misses)
		p.line("  Get p50 %s, p99 %s; the disk's 4 KiB random read p50 %s, p99 %s; Get p99 / read p99 = %.2f",
			us(cg.GetP50Us), us(cg.GetP99Us), us(cg.ReadP50Us), us(cg.ReadP99Us), cg.Ratio)
	}
	if mm := r.Mem; mm != nil {
		p.line("")
		p.line("mem: %s items of %d B, filled in %s", count(float64(mm.Items)), mm.BodyBytes, secs(mm.FillSeconds))
		p.line("  in use after GC: %s = heap %s + index outside the heap %s (baseline heap %s); %s objects",
			bytesText(float64(mm.HeapInuse)+float64(mm.MappedBytes)), bytesText(float64(mm.HeapInuse)), bytesText(float64(mm.MappedBytes)),
			bytesText(float64(mm.BaselineHeapInuse)), count(float64(mm.HeapObjects)))
		p.line("  bodies in memory (cache, not yet placed): %s", bytesText(float64(mm.CachedBytes)))
		p.line("  per item, those bodies excluded: %.1f B (in-use spans), %.1f B (live objects); max RSS %s",
			mm.PerItem, mm.PerItemAlloc, bytesText(float64(mm.MaxRSS)))
	}
	for _, n := range r.Notes {
		p.line("note: %s", n)
	}
	return p.err
}

func (p *printer) runText(run *RunResult, workload string) {
	what := "items"
	if workload == "put" {
		what = "puts"
	}
	p.line("result: %s %s/s (%s in %s)   %s ops/s   %s records/s   backlog at end %s",
		count(run.ItemsPerSec), what, count(float64(run.Items)), secs(run.Seconds), count(run.OpsPerSec),
		count(run.RecordsPerSec), count(float64(run.Backlog)))
	p.line("  latency        count       mean        p50        p99      p99.9        max")
	for _, name := range []string{"put", "get", "ack", "e2e"} {
		l, ok := run.Latency[name]
		if !ok {
			continue
		}
		p.line("  %-5s %12s %10s %10s %10s %10s %10s", name, count(float64(l.Count)), us(l.MeanUs), us(l.P50Us), us(l.P99Us), us(l.P999Us), us(l.MaxUs))
	}
	p.line("  fsyncs %s/s (mean %s), group commit %.1f records per batch", count(run.FsyncsPerSec), us(run.FsyncMeanUs), run.AvgBatch)
	p.line("  cpu %.2f cores: %.1f µs per item, %.1f µs per op; %.1f allocs, %s per item",
		run.CPUCores, run.CPUPerItemUs, run.CPUPerOpUs, run.AllocsPerItem, bytesText(run.AllocBytesPerItem))
	p.line("  peak heap in use %s, max RSS %s", bytesText(float64(run.PeakHeapInuse)), bytesText(float64(run.MaxRSS)))
}

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) line(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format+"\n", args...)
	}
}

// count prints n with thousands separators.
func count(n float64) string {
	s := strconv.FormatInt(int64(n+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func us(v float64) string {
	switch {
	case v < 0:
		return "-" + us(-v)
	case v < 1000:
		return fmt.Sprintf("%.1fµs", v)
	case v < 1e6:
		return fmt.Sprintf("%.2fms", v/1e3)
	}
	return fmt.Sprintf("%.2fs", v/1e6)
}

func secs(s float64) string { return us(s * 1e6) }

func bytesText(b float64) string {
	switch {
	case b < 1024:
		return fmt.Sprintf("%.0f B", b)
	case b < 1<<20:
		return fmt.Sprintf("%.1f KiB", b/1024)
	case b < 1<<30:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", b/(1<<30))
}
