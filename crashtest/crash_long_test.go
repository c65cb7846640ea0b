//go:build long

package crashtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The crash cycles are long tests: scripts/long-tests runs them, and
// soak.sh and cmd/walq-crashtest run thousands.

// Environment knobs for longer or different runs of the tests:
//
//	WALQ_CRASH_CYCLES  cycles per mode (default 12, 4 with -short)
//	WALQ_CRASH_SEED    seed (default: from the clock; always logged)
//	WALQ_CRASH_MIX     workload overrides, as for walq-crashtest -mix
//	WALQ_CRASH_DIR     keep the run's directories under this one
//
// soak.sh and cmd/walq-crashtest are the way to run thousands of cycles.
func envConfig(t *testing.T, sync string, powerLoss bool) Config {
	t.Helper()
	cycles := 12
	if testing.Short() {
		cycles = 4
	}
	if v := os.Getenv("WALQ_CRASH_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("WALQ_CRASH_CYCLES: %v", err)
		}
		cycles = n
	}
	var seed uint64
	if v := os.Getenv("WALQ_CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("WALQ_CRASH_SEED: %v", err)
		}
		seed = n
	}
	mix, err := ParseMix(DefaultMix, os.Getenv("WALQ_CRASH_MIX"))
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Cycles: cycles, Seed: seed, Sync: sync, PowerLoss: powerLoss, Mix: mix,
		Child: []string{self}, StopOnViolation: true, Log: t.Logf,
	}
	if d := os.Getenv("WALQ_CRASH_DIR"); d != "" {
		cfg.Dir = filepath.Join(d, strings.ReplaceAll(t.Name(), "/", "-"))
	}
	return cfg
}

func TestCrash(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sync      string
		powerLoss bool
		stepClock bool
	}{
		{"kill/always/stepclock", "always", false, true},
		{"kill/never", "never", false, false},
		{"powerloss/always/stepclock", "always", true, true},
		{"powerloss/interval", "interval:20ms", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := envConfig(t, tc.sync, tc.powerLoss)
			cfg.StepClock = tc.stepClock
			cfg.Log = func(format string, args ...any) {
				if !strings.Contains(format, "): power loss: ") || testing.Verbose() {
					t.Logf(format, args...)
				}
			}
			sum, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(sum)
			if len(sum.Violations) > 0 {
				t.Errorf("seed %d, cycle %d, directory kept: %s", sum.Seed, sum.Cycles, sum.Dir)
				for _, v := range sum.Violations {
					t.Error(v)
				}
			}
			if sum.Kills < cfg.Cycles || sum.Ops == 0 || sum.Checks == 0 || (tc.stepClock && sum.ClockSteps == 0) {
				t.Errorf("the run proved little: %s", sum)
			}
		})
	}
}

// TestCrashQueues runs the workload over three named queues besides the
// default queue, pausing, resuming, deleting and re-creating them
// (queues.go), under kill -9 and under page loss with each child's sync
// policy drawn from the three, and checks that the run found nothing and
// that the queues were paused, resumed, deleted and created again, and
// found so at the checks.
func TestCrashQueues(t *testing.T) {
	crashQueues(t, 3, 30, func(sum Summary) bool {
		return sum.PausesTimed == 0 || sum.PausesForever == 0 || sum.Resumes == 0 || sum.Deletes == 0 ||
			sum.Recreated == 0 || sum.PausesHeld == 0 || sum.DeletesHeld == 0 || sum.SharedKeys == 0 || sum.PoolRuns == 0
	})
}

// TestCrashManyQueues runs the workload over 300 named queues under kill
// -9 and page loss: the timer's order of queues, the released keys kept
// per queue and WorkQueues over every queue crash and recover as they do
// over three.
func TestCrashManyQueues(t *testing.T) {
	crashQueues(t, 300, 20, func(sum Summary) bool { return sum.Deletes == 0 || sum.Recreated == 0 || sum.PoolRuns == 0 })
}

// crashQueues runs the workload over n named queues for cycles cycles
// (unless WALQ_CRASH_CYCLES says), under kill -9 with SyncAlways and under
// page loss with each child's sync policy drawn from the three, and fails
// on a violation, or when the run proved little: fewer kills than cycles,
// no operation or check, or little(sum).
func crashQueues(t *testing.T, n, cycles int, little func(Summary) bool) {
	for _, tc := range []struct {
		name     string
		sync     string
		pageLoss bool
	}{
		{"kill/always", "always", false},
		{"pageloss/cycle", "cycle", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := envConfig(t, tc.sync, tc.pageLoss)
			cfg.PageLoss = tc.pageLoss
			cfg.StepClock = true
			cfg.Queues = n
			if os.Getenv("WALQ_CRASH_CYCLES") == "" {
				cfg.Cycles = cycles
			}
			cfg.Log = nil
			sum, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(sum)
			if len(sum.Violations) > 0 {
				t.Errorf("seed %d, cycle %d, directory kept: %s", sum.Seed, sum.Cycles, sum.Dir)
				for _, v := range sum.Violations {
					t.Error(v)
				}
			}
			if sum.Kills < cfg.Cycles || sum.Ops == 0 || sum.Checks == 0 || little(sum) {
				t.Errorf("the run proved little: %s", sum)
			}
		})
	}
}

// TestCrashLowDisk runs the workload on an 8 MiB tmpfs with a third of its
// items large (Config.LowDisk): puts must be refused with ErrDiskFull, and
// the queue must never fail itself. It needs root.
func TestCrashLowDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a low disk is a tmpfs, which needs root to mount")
	}
	cfg := envConfig(t, "cycle", false)
	cfg.StepClock = true
	cfg.Queues = 3
	cfg.LowDisk = 8 << 20
	cfg.Mix.Large = 30
	if os.Getenv("WALQ_CRASH_CYCLES") == "" {
		cfg.Cycles = 30
	}
	cfg.Log = nil
	sum, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(sum)
	if len(sum.Violations) > 0 {
		t.Errorf("seed %d, cycle %d, directory kept: %s", sum.Seed, sum.Cycles, sum.Dir)
		for _, v := range sum.Violations {
			t.Error(v)
		}
	}
	if sum.Kills < cfg.Cycles || sum.Ops == 0 || sum.Checks == 0 || sum.DiskRefused == 0 {
		t.Errorf("the run proved little (no put met the watermark?): %s", sum)
	}
}

// TestCatchesEarlyAck is the harness's own test: the queue built with the
// tag walq_bug_early_ack returns from every call before its record is
// durable, and the harness must report it.
func TestCatchesEarlyAck(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the broken child with")
	}
	bin := filepath.Join(t.TempDir(), "walq-crashtest-early-ack")
	build := exec.Command(gobin, "build", "-tags", "walq_bug_early_ack", "-o", bin, "./cmd/walq-crashtest")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the broken child: %v\n%s", err, out)
	}
	for _, mode := range []string{"powerloss", "pageloss", "pageloss/queues", "kill"} {
		cfg := envConfig(t, "always", mode != "kill")
		cfg.PageLoss = strings.HasPrefix(mode, "pageloss")
		if mode == "pageloss/queues" {
			cfg.Queues = 3
		}
		cfg.Cycles = 30
		if mode == "kill" {
			// Without a power loss only a kill between the call's return and
			// the write of its batch loses a record: runs at b1ca339 on tmpfs
			// missed it in 30 cycles about one time in five. The run stops at
			// the first violation.
			cfg.Cycles = 150
		}
		cfg.Child = []string{bin}
		cfg.Log = nil
		start := time.Now()
		sum, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(sum.Violations) == 0 {
			t.Fatalf("%s: the harness did not notice a queue that acknowledges before fsync: %s", mode, sum)
		}
		os.RemoveAll(sum.Dir)
		t.Logf("%s: caught at cycle %d in %v, e.g. %q", mode, sum.Cycles,
			time.Since(start).Round(time.Millisecond), sum.Violations[0])
	}
}

// TestPageLossEveryPolicy turns around what TestPageLossFindsTheFormat1Limit
// showed of log format 1, which refused to open after a power loss that
// wrote unsynced pages back out of order (a later page on the disk, an
// earlier one not), within 2 to 63 cycles of this mode in every run. Format
// 2 tells such holes from corruption by the watermarks its frames carry:
// under each sync policy, page loss in the unsynced range of the tail (and
// only there) must never refuse an open, lose a promised record or bring
// back an acked item.
func TestPageLossEveryPolicy(t *testing.T) {
	for _, sync := range []string{"always", "interval:100ms", "never"} {
		t.Run(sync, func(t *testing.T) {
			cfg := envConfig(t, sync, true)
			cfg.PageLoss = true
			if os.Getenv("WALQ_CRASH_CYCLES") == "" {
				cfg.Cycles = 70 // more than format 1 ever needed to refuse an open
				if testing.Short() {
					cfg.Cycles = 12
				}
			}
			cfg.StepClock = true
			// Work's checks run in TestCrash and in the soak. Here, 210
			// cycles under -race on a loaded two-core machine would meet
			// heartbeats held up for longer than the visibility, which the
			// child cannot always tell from a bug (work.go).
			cfg.Mix.Workers = 0
			cfg.Log = nil
			sum, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(sum)
			if sum.Refused != 0 || sum.Lost != 0 || sum.Resurrected != 0 || len(sum.Violations) > 0 {
				t.Errorf("seed %d, cycle %d, directory kept: %s", sum.Seed, sum.Cycles, sum.Dir)
				for _, v := range sum.Violations {
					t.Error(v)
				}
			}
			if sum.Kills < cfg.Cycles || sum.Checks == 0 || sum.Ops == 0 {
				t.Errorf("the run proved little: %s", sum)
			}
		})
	}
}
