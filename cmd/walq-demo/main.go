// Command walq-demo reproduces, measured on this machine, the experiment of
// the article walq starts from, and then kills a worker process with
// SIGKILL to show that nothing is lost.
//
// Part 1 runs the article's experiment — 500 items, 10 workers, 2% of the
// items hang until a 2 s per-item timeout, 10% of the runs take 0.6 s,
// visibility 0.5 s, 3 attempts — three ways at once: a plain Go channel
// queue, walq used without a heartbeat (Get, then Ack only on success, like
// the article's AckQueue), and walq's Work. It prints the article's table
// with the measured figures under the article's.
//
// Part 2 runs the same work in a child process (this program again, with
// -child) on a queue directory, SIGKILLs it halfway, reopens the directory,
// finishes the work and checks that every item is accounted for.
//
//	go run ./cmd/walq-demo                       # both parts, about 25 s
//	go run ./cmd/walq-demo -part 1 -items 2000   # a bigger part 1 only
//	go run ./cmd/walq-demo -metrics :9090        # /metrics on 127.0.0.1:9090 meanwhile
//
// The queues live in a temporary directory, removed at the end unless
// -keep is given; the program says where.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/walq/walq"
)

// config is the experiment; its defaults are the article's.
type config struct {
	items      int
	workers    int
	hang       float64       // share of the items whose handler hangs until the timeout, every attempt
	slow       float64       // share of the runs (not items) that take slowTime
	slowTime   time.Duration // longer than the visibility: the case the heartbeat exists for
	workTime   time.Duration // every other run
	timeout    time.Duration // per-item timeout
	visibility time.Duration
	attempts   int
	seed       uint64
}

func (c *config) register(fs *flag.FlagSet) {
	fs.IntVar(&c.items, "items", 500, "items to process")
	fs.IntVar(&c.workers, "workers", 10, "workers")
	fs.Float64Var(&c.hang, "hang", 0.02, "share of the items that hang until the per-item timeout, on every attempt")
	fs.Float64Var(&c.slow, "slow", 0.10, "share of the runs that are slow (each run draws anew, as the article's figures imply)")
	fs.DurationVar(&c.slowTime, "slow-time", 600*time.Millisecond, "duration of a slow run")
	fs.DurationVar(&c.workTime, "work-time", 10*time.Millisecond, "duration of every other run (the article does not say)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "per-item timeout")
	fs.DurationVar(&c.visibility, "visibility", 500*time.Millisecond, "walq's visibility timeout (lease)")
	fs.IntVar(&c.attempts, "attempts", 3, "attempts before an item is dead-lettered")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed: which items hang, which runs are slow")
}

// args gives the flags that make a child process run the same experiment.
func (c *config) args() []string {
	return []string{
		"-items", fmt.Sprint(c.items), "-workers", fmt.Sprint(c.workers),
		"-hang", fmt.Sprint(c.hang), "-slow", fmt.Sprint(c.slow),
		"-slow-time", c.slowTime.String(), "-work-time", c.workTime.String(),
		"-timeout", c.timeout.String(), "-visibility", c.visibility.String(),
		"-attempts", fmt.Sprint(c.attempts), "-seed", fmt.Sprint(c.seed),
	}
}

func (c *config) isArticle() bool {
	return c.items == 500 && c.workers == 10 && c.hang == 0.02 && c.slow == 0.10 && c.slowTime == 600*time.Millisecond &&
		c.timeout == 2*time.Second && c.visibility == 500*time.Millisecond && c.attempts == 3
}

func (c *config) describe() string {
	return fmt.Sprintf("%d items, %d workers, %g%% hang until the %v per-item timeout, %g%% of runs take %v (the others %v), visibility %v, %d attempts",
		c.items, c.workers, c.hang*100, c.timeout, c.slow*100, c.slowTime, c.workTime, c.visibility, c.attempts)
}

// queueOptions are the walq options of every queue of the demo: the
// experiment's visibility and attempts, SyncAlways (the default), and no
// backoff, as the article's queue puts an item back at once.
func (c *config) queueOptions() walq.Options {
	return walq.Options{
		Visibility:  c.visibility,
		MaxAttempts: c.attempts,
		Backoff:     func(int) time.Duration { return 0 },
	}
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("walq-demo", flag.ExitOnError)
	cfg.register(fs)
	part := fs.Int("part", 0, "run only part 1 (the article's experiment) or part 2 (kill -9 and recover); 0: both")
	dir := fs.String("dir", "", "directory for the queues (default: a new temporary directory)")
	keep := fs.Bool("keep", false, "keep the queue directories at the end")
	killAt := fs.Float64("kill-at", 0.5, "part 2: SIGKILL the child once this share of the items is finished")
	metricsAddr := fs.String("metrics", "", "serve Prometheus /metrics on this address while running (a bare :PORT binds 127.0.0.1)")
	child := fs.String("child", "", "internal: run as part 2's child process on this queue directory")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: walq-demo [flags]\n\nReproduces the visibility-timeout experiment with walq, then survives a kill -9.\n\n")
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	if err := cfg.check(); err != nil {
		fmt.Fprintln(os.Stderr, "walq-demo:", err)
		os.Exit(2)
	}
	if *child != "" {
		if err := runChild(&cfg, *child); err != nil {
			fmt.Fprintln(os.Stderr, "walq-demo child:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(&cfg, *part, *dir, *keep, *killAt, *metricsAddr); err != nil {
		fmt.Fprintln(os.Stderr, "walq-demo:", err)
		os.Exit(1)
	}
}

func (c *config) check() error {
	switch {
	case c.items < 1 || c.workers < 1 || c.attempts < 1:
		return errors.New("-items, -workers and -attempts must be at least 1")
	case c.hang < 0 || c.hang > 1 || c.slow < 0 || c.slow > 1:
		return errors.New("-hang and -slow are shares between 0 and 1")
	case c.visibility <= 0 || c.timeout <= 0 || c.slowTime < 0 || c.workTime < 0:
		return errors.New("durations must be positive")
	}
	return nil
}

func run(cfg *config, part int, dir string, keep bool, killAt float64, metricsAddr string) error {
	start := time.Now()
	base := dir
	if base == "" {
		var err error
		if base, err = os.MkdirTemp("", "walq-demo-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(base, 0o700); err != nil {
		return err
	}
	for _, sub := range []string{"no-heartbeat", "work", "crash"} {
		if _, err := os.Stat(filepath.Join(base, sub)); err == nil {
			return fmt.Errorf("%s already holds a %s queue from an earlier run; pick another -dir", base, sub)
		}
	}
	if keep {
		fmt.Printf("queues in %s (kept)\n", base)
	} else {
		fmt.Printf("queues in %s (removed at the end; -keep keeps them)\n", base)
		defer os.RemoveAll(base)
	}

	reg := prometheus.NewRegistry()
	if metricsAddr != "" {
		addr, err := serveMetrics(metricsAddr, reg)
		if err != nil {
			return err
		}
		fmt.Printf("metrics on http://%s/metrics\n", addr)
	}
	fmt.Printf("machine: %s\n\n", machine())

	ok := true
	if part == 0 || part == 1 {
		good, err := part1(cfg, base, reg)
		if err != nil {
			return err
		}
		ok = ok && good
	}
	if part == 0 || part == 2 {
		if part == 0 {
			fmt.Println()
		}
		good, err := part2(cfg, filepath.Join(base, "crash"), killAt, reg)
		if err != nil {
			return err
		}
		ok = ok && good
	}
	fmt.Printf("\ntotal %.1fs\n", time.Since(start).Seconds())
	if !ok {
		return errors.New("walq broke a promise: see above")
	}
	return nil
}

// serveMetrics serves reg on addr, on the loopback interface unless addr
// names a host.
func serveMetrics(addr string, reg *prometheus.Registry) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if host, port, err = net.SplitHostPort(":" + addr); err != nil { // a bare port
			return "", fmt.Errorf("-metrics %q: %w", addr, err)
		}
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	go http.Serve(ln, mux)
	return ln.Addr().String(), nil
}

// machine describes where the figures were measured.
func machine() string {
	cpu := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":")) + ", "
				break
			}
		}
	}
	return fmt.Sprintf("%s/%s, %s%d CPUs, %s", runtime.GOOS, runtime.GOARCH, cpu, runtime.NumCPU(), runtime.Version())
}

// progress shows one line that rewrites itself on a terminal; elsewhere
// (output piped or captured) it prints a line every few seconds, to
// stderr, so that stdout keeps only the report.
type progress struct {
	tty   bool
	last  time.Time
	shown bool
}

func newProgress() *progress {
	fi, err := os.Stderr.Stat()
	return &progress{tty: err == nil && fi.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) show(line string) {
	if p.tty {
		fmt.Fprintf(os.Stderr, "\r\033[K%s", line)
		p.shown = true
		return
	}
	if time.Since(p.last) >= 3*time.Second {
		fmt.Fprintln(os.Stderr, line)
		p.last = time.Now()
	}
}

func (p *progress) done() {
	if p.tty && p.shown {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
}

// watch calls line every 100ms until ctx ends and shows the result.
func watch(ctx context.Context, line func() string) {
	p := newProgress()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	defer p.done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.show(line())
		}
	}
}

// register adds a queue's collector to reg and returns its removal.
func register(reg *prometheus.Registry, q *walq.Queue, name string) func() {
	c := walq.NewCollector(q, name)
	if err := reg.Register(c); err != nil {
		fmt.Fprintf(os.Stderr, "walq-demo: metrics for %s: %v\n", name, err)
		return func() {}
	}
	return func() { reg.Unregister(c) }
}
