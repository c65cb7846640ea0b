// Command walq-crashtest runs the kill -9 crash harness of package
// crashtest against a real directory and prints a one-line summary:
//
//	walq-crashtest -cycles 1000 -sync always -powerloss -stepclock
//	walq-crashtest -cycles 1000 -sync cycle -pageloss -stepclock -queues 3
//
// The same binary is the child the harness starts and kills. It exits 1
// when the run found violations (0 with -expect-violations), 2 on a usage
// or setup error.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/walq/walq/crashtest"
)

func main() {
	if crashtest.IsChild() {
		os.Exit(crashtest.ChildMain())
	}
	var (
		cycles    = flag.Int("cycles", 100, "kill -9 cycles")
		seed      = flag.Uint64("seed", 0, "seed of the parent's choices (0: from the clock; printed)")
		sync      = flag.String("sync", "always", "sync policy: always, never, interval:<duration>, or cycle (one of always, interval:100ms and never drawn for each child)")
		powerLoss = flag.Bool("powerloss", false, "after each kill, cut the log back to what was fsynced, as a power loss would")
		pageLoss  = flag.Bool("pageloss", false, "power loss that keeps random pages of what was not fsynced and not others, as out-of-order writeback would (implies -powerloss)")
		stepClock = flag.Bool("stepclock", false, "step each child's wall clock back and forward while it runs, and start it behind the previous child's")
		mix       = flag.String("mix", "", "workload overrides, e.g. producers=4,ack=50,compact=5ms (see crashtest.Mix)")
		maxRun    = flag.Duration("maxrun", 400*time.Millisecond, "longest a child runs before its kill")
		segment   = flag.Int64("segment", 8<<10, "segment size of the queue under test")
		dir       = flag.String("dir", "", "working directory (default: a temporary one, removed after a clean run)")
		verbose   = flag.Bool("v", false, "log every cycle")
		expect    = flag.Bool("expect-violations", false, "succeed only if violations are found (for a build with an injected bug)")
		idleEvery = flag.Int("idle-every", 0, "run the idle check (no busy wake-ups with consumers blocked and nothing due) after the first check, every n-th and the last (0: every 8th; -1: never)")
		queues    = flag.Int("queues", 0, "named queues besides the default queue, paused, resumed, deleted and created again while the workload runs on all of them (0: the default queue only)")
		lowDisk   = flag.Int64("lowdisk", 0, "bytes of a tmpfs the queue lives on (Linux, root), with the children's Options.DiskWatermark at a quarter of it and automatic compaction on (0: the working directory's disk)")
	)
	flag.Parse()
	m, err := crashtest.ParseMix(crashtest.DefaultMix, *mix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg := crashtest.Config{
		Cycles: *cycles, Seed: *seed, Sync: *sync, PowerLoss: *powerLoss, PageLoss: *pageLoss, StepClock: *stepClock, Mix: m,
		SegmentSize: *segment, MaxRun: *maxRun, Dir: *dir, Child: []string{self},
		StopOnViolation: true, Queues: *queues, IdleEvery: *idleEvery, LowDisk: *lowDisk,
		Log: func(format string, args ...any) {
			if *verbose {
				fmt.Fprintf(os.Stderr, format+"\n", args...)
			}
		},
	}
	sum, err := crashtest.Run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, s := range sum.StarvedSeen {
		fmt.Fprintln(os.Stderr, "starved (not a violation):", s)
	}
	for i, v := range sum.Violations {
		if i == 20 {
			fmt.Fprintf(os.Stderr, "... and %d more\n", len(sum.Violations)-i)
			break
		}
		fmt.Fprintln(os.Stderr, "violation:", v)
	}
	if len(sum.Violations) > 0 {
		fmt.Fprintf(os.Stderr, "seed %d, cycle %d, directory kept: %s\n", sum.Seed, sum.Cycles, sum.Dir)
	}
	fmt.Println(sum)
	if (len(sum.Violations) > 0) != *expect {
		os.Exit(1)
	}
}
