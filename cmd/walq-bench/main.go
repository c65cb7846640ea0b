// Command walq-bench is a load generator for walq, in the spirit of
// redis-benchmark and pgbench: it runs one workload against a queue in a
// fresh directory and reports throughput, per-operation latency, fsyncs and
// group-commit batches, CPU time and memory, beside the ceiling of the disk
// it runs on.
//
// Usage:
//
//	walq-bench [flags] WORKLOAD
//
// Workloads:
//
//	put      producers put durably
//	cycle    producers put, consumers lease and ack (-consumer work|plain)
//	delay    items with random delays up to -delay-max; lateness of each
//	         delivery and the count of early ones (which must be 0)
//	recover  fill -n items, close, time Open until the first Get returns
//	         (-recover-case: what the directory went through after the
//	         fill; -from-snapshot: compact before closing; otherwise automatic
//	         compaction is off, and Close writes the index when the
//	         records since the last snapshot are at least 1,000 and an
//	         eighth of the items, or the log holds 64 MiB, as it does for
//	         a service; below that the log alone is replayed)
//	compact  cycle with and without compaction running: put latency of
//	         both, and disk use after it against the live bytes
//	mem      fill -n items; memory in use after a GC (the heap, and the
//	         index mapped outside it), per item, minus the bodies in memory
//	coldget  fill -n items, reopen without a body cache, keep a few spread
//	         across the backlog, drop the page cache, and time each Get
//	         beside a 4 KiB read of the disk at a random offset (Linux)
//	scale    fill -n items (10,000,000), close, recover, drain half while
//	         compactions run back to back, drain the rest: times, disk
//	         use and peak RSS
//	idle     -queues named queues (default 1000), a Get blocked on each,
//	         some paused with a due item, some past a timed pause: the
//	         process's CPU over -duration (default 10s) while nothing happens
//
// Before put, cycle and compact it calibrates the disk: records of the
// same size appended to a growing file with write(2) and fsync, as the
// log writes its segments, by one writer and then by as many
// writers as the workload has, sharing each fsync. walq's figures are
// printed as a ratio of that ceiling.
//
// The queue directory is created under -dir (default: the OS temp
// directory) and removed at the end unless -keep. Everything runs in this
// one process; CPU time and memory are the process's own.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/walq/walq"
)

func main() {
	if leaseChild() {
		return
	}
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "walq-bench:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

var workloads = []string{"put", "cycle", "delay", "recover", "compact", "mem", "coldget", "scale", "idle"}

// config is the parsed command line.
type config struct {
	workload     string
	producers    int
	consumers    int
	queues       int
	body         int
	n            int64
	duration     time.Duration
	sync         walq.SyncPolicy
	syncName     string
	segmentSize  int64
	dir          string
	keep         bool
	consumer     string
	json         bool
	calibrate    bool
	calibrateFor time.Duration
	cpuProfile   string
	memProfile   string
	delayMax     time.Duration
	fromSnapshot bool
	cold         bool
	recoverCase  string
	batch        int
	maxReady     int
	prefill      int
	compactEvery time.Duration
	seed         uint64
}

// visibility is the lease time of every workload: long enough that no
// lease runs out during a run, so every delivery is a first one.
const visibility = 5 * time.Minute

func parseArgs(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("walq-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.producers, "producers", 16, "goroutines that put")
	fs.IntVar(&c.consumers, "consumers", 16, "goroutines (or Work workers) that lease and ack [delay: 4]")
	fs.IntVar(&c.queues, "queues", 1, "put, cycle, delay: named queues in the one directory, each with -producers and -consumers of its own (1: the default queue alone) [idle: 1000, each with a Get blocked]")
	fs.IntVar(&c.body, "body", 128, "body size in bytes")
	fs.Int64Var(&c.n, "n", 0, "items to put (instead of -duration) [delay: 1000; recover, mem: 1000000]")
	fs.DurationVar(&c.duration, "duration", 0, "how long to run (instead of -n) [put, cycle: 5s; compact: 5s per phase]")
	fs.StringVar(&c.syncName, "sync", "always", "sync policy: always, never or interval:DURATION (e.g. interval:10ms)")
	fs.Int64Var(&c.segmentSize, "segment-size", 0, "log segment size in bytes [walq's default, 4 MiB]")
	fs.StringVar(&c.dir, "dir", "", "where to create the queue directory [the OS temp directory]")
	fs.BoolVar(&c.keep, "keep", false, "keep the queue directory after the run")
	fs.StringVar(&c.consumer, "consumer", "work", "consumer path: work (q.Work: an ack and the next lease share one fsync wait) or plain (Get, then Ack, each waited for)")
	fs.BoolVar(&c.json, "json", false, "print the result as one JSON object")
	fs.BoolVar(&c.calibrate, "calibrate", false, "calibrate the disk first [put, cycle, compact: true]")
	fs.DurationVar(&c.calibrateFor, "calibrate-time", 2*time.Second, "length of each of the two calibration runs")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured phase to this file")
	fs.StringVar(&c.memProfile, "memprofile", "", "write an allocation profile (whole process) to this file at the end (mem: while the items are queued)")
	fs.DurationVar(&c.delayMax, "delay-max", 200*time.Millisecond, "delay: the largest random delay")
	fs.BoolVar(&c.fromSnapshot, "from-snapshot", false, "recover: compact before closing, so recovery loads a snapshot")
	fs.StringVar(&c.recoverCase, "recover-case", "pristine", "recover: what the directory went through after the fill: pristine (nothing), delayed (items over two priorities, 1% of them nacked into an hour's backoff), closed (1% leased and acked, then a clean Close), killed (1% leased by a process killed with SIGKILL)")
	fs.BoolVar(&c.cold, "cold", false, "recover: drop the queue's files from the page cache before reopening (Linux)")
	fs.IntVar(&c.batch, "batch", 1, "recover, mem, compact prefill: items per PutBatch when filling (1: one Put each)")
	fs.IntVar(&c.maxReady, "max-ready", 0, "cycle, delay, compact: producers wait while this many items are put and not yet delivered (0: no bound)")
	fs.IntVar(&c.prefill, "prefill", 100000, "compact: delayed items that stay in the queue as its live data")
	fs.DurationVar(&c.compactEvery, "compact-every", 0, "compact: pause between forced compactions (0: back to back)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the random delays")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: walq-bench [flags] WORKLOAD\n\nworkloads: %s\n\nflags:\n", strings.Join(workloads, ", "))
		fs.PrintDefaults()
	}

	// The workload may come before or after the flags.
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		c.workload, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{err}
	}
	rest := fs.Args()
	if c.workload == "" && len(rest) > 0 {
		c.workload, rest = rest[0], rest[1:]
		if err := fs.Parse(rest); err != nil {
			return nil, usageError{err}
		}
		rest = fs.Args()
	}
	if len(rest) > 0 {
		return nil, usageError{fmt.Errorf("unexpected arguments %q", rest)}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := c.finish(set); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// finish checks the flags and fills in the per-workload defaults of those
// not given.
func (c *config) finish(set map[string]bool) error {
	known := false
	for _, w := range workloads {
		known = known || w == c.workload
	}
	if !known {
		return fmt.Errorf("workload %q: want one of %s", c.workload, strings.Join(workloads, ", "))
	}
	if set["n"] && set["duration"] {
		return errors.New("give -n or -duration, not both")
	}
	if !set["n"] && !set["duration"] {
		switch c.workload {
		case "delay":
			c.n = 1000
		case "recover", "mem":
			c.n = 1_000_000
		case "coldget":
			c.n = 500_000
		case "scale":
			c.n = 10_000_000
		case "idle":
			c.duration = 10 * time.Second
		default:
			c.duration = 5 * time.Second
		}
	}
	if c.workload == "idle" && !set["queues"] {
		c.queues = 1000
	}
	if c.workload == "delay" && !set["consumers"] {
		c.consumers = 4
	}
	if !set["calibrate"] {
		c.calibrate = c.workload == "put" || c.workload == "cycle" || c.workload == "compact"
	}
	switch {
	case c.n < 0 || c.duration < 0:
		return errors.New("-n and -duration must not be negative")
	case (c.workload == "recover" || c.workload == "mem") && c.n <= 0:
		return fmt.Errorf("%s needs -n", c.workload)
	case c.producers < 1:
		return errors.New("-producers must be at least 1")
	case c.consumers < 1 && c.workload != "put":
		return errors.New("-consumers must be at least 1")
	case c.body < 0:
		return errors.New("-body must not be negative")
	case c.workload == "delay" && c.body < delayBodyMin:
		return fmt.Errorf("delay needs -body of at least %d bytes (it carries the delay)", delayBodyMin)
	case !slices.Contains(recoverCases, c.recoverCase):
		return fmt.Errorf("-recover-case %q: want one of %s", c.recoverCase, strings.Join(recoverCases, ", "))
	case c.recoverCase != "pristine" && c.workload != "recover":
		return fmt.Errorf("-recover-case applies to recover, not %s", c.workload)
	case c.batch < 1:
		return errors.New("-batch must be at least 1")
	case c.queues < 1:
		return errors.New("-queues must be at least 1")
	case c.queues > 1 && c.workload != "put" && c.workload != "cycle" && c.workload != "delay" && c.workload != "idle":
		return fmt.Errorf("-queues applies to put, cycle, delay and idle, not %s", c.workload)
	case c.maxReady < 0:
		return errors.New("-max-ready must not be negative")
	case c.consumer != "work" && c.consumer != "plain":
		return fmt.Errorf("-consumer %q: want work or plain", c.consumer)
	case c.delayMax < 0 || c.compactEvery < 0 || c.calibrateFor <= 0:
		return errors.New("durations must not be negative")
	}
	switch {
	case c.syncName == "always":
		c.sync = walq.SyncAlways
	case c.syncName == "never":
		c.sync = walq.SyncNever
	case strings.HasPrefix(c.syncName, "interval:"):
		d, err := time.ParseDuration(strings.TrimPrefix(c.syncName, "interval:"))
		if err != nil || d <= 0 {
			return fmt.Errorf("-sync %q: want interval:DURATION with a positive duration", c.syncName)
		}
		c.sync = walq.SyncInterval(d)
	default:
		return fmt.Errorf("-sync %q: want always, never or interval:DURATION", c.syncName)
	}
	return nil
}

// options are the queue options of every workload; the workloads that
// need it turn automatic compaction off.
func (c *config) options() walq.Options {
	return walq.Options{Sync: c.sync, SegmentSize: c.segmentSize, Visibility: visibility}
}

// segmentBytes is the segment size in effect.
func (c *config) segmentBytes() int64 {
	if c.segmentSize > 0 {
		return c.segmentSize
	}
	return 4 << 20
}

// writers is how many goroutines write to the log at once.
func (c *config) writers() int {
	if c.workload == "put" {
		return c.producers
	}
	return c.producers + c.consumers
}

func run(args []string, stdout io.Writer) error {
	return runWith(args, stdout, os.Stderr)
}

func runWith(args []string, stdout, stderr io.Writer) (err error) {
	cfg, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	parent := cfg.dir
	if parent == "" {
		parent = os.TempDir()
	} else if err := os.MkdirAll(parent, 0o700); err != nil {
		return err
	}
	work, err := os.MkdirTemp(parent, "walq-bench-")
	if err != nil {
		return err
	}
	if !cfg.keep {
		defer func() {
			if rerr := os.RemoveAll(work); err == nil && rerr != nil {
				err = rerr
			}
		}()
	}
	qdir := filepath.Join(work, "queue")
	prof := &profiler{path: cfg.cpuProfile}
	defer prof.stop()

	res := &Result{Workload: cfg.workload, Config: cfg.report(qdir), Machine: machine(work)}
	res.Config.Args = strings.Join(args, " ")
	if cfg.calibrate {
		res.Calibration, err = calibrate(work, calibrationRecordBytes(cfg.body), cfg.writers(), cfg.calibrateFor)
		if err != nil {
			return err
		}
	}
	switch cfg.workload {
	case "put", "cycle", "delay":
		err = runLoadWorkload(cfg, qdir, prof, res)
	case "recover":
		res.Recover, err = runRecover(cfg, qdir, prof)
	case "compact":
		res.Compact, err = runCompact(cfg, qdir, prof)
	case "mem":
		res.Mem, err = runMem(cfg, qdir)
	case "coldget":
		res.ColdGet, err = runColdGet(cfg, qdir)
	case "scale":
		res.Scale, err = runScale(cfg, qdir)
	case "idle":
		res.Idle, err = runIdle(cfg, qdir)
	}
	if err != nil {
		return err
	}
	if err := prof.stop(); err != nil {
		return err
	}
	res.judge(cfg)
	if cfg.memProfile != "" && cfg.workload != "mem" { // mem writes it with its items queued
		if err := writeAllocProfile(cfg.memProfile); err != nil {
			return err
		}
	}
	if cfg.keep {
		res.Notes = append(res.Notes, "queue directory kept: "+qdir)
	}
	if cfg.json {
		return res.writeJSON(stdout)
	}
	return res.writeText(stdout)
}

// calibrationRecordBytes is about what a Put record of body bytes takes in
// the log: the envelope (14 bytes) and the msgpack-encoded put around the
// body.
func calibrationRecordBytes(body int) int { return body + 40 }

// profiler writes a CPU profile of the measured phases only: the workloads
// call start and stop around them.
type profiler struct {
	path string
	f    *os.File
	done bool
}

func (p *profiler) start() error {
	if p.path == "" || p.f != nil || p.done {
		return nil
	}
	f, err := os.Create(p.path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	p.f = f
	return nil
}

func (p *profiler) stop() error {
	if p.f == nil {
		return nil
	}
	pprof.StopCPUProfile()
	err := p.f.Close()
	p.f, p.done = nil, true
	return err
}

func writeAllocProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
