package crashtest

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/walq/walq"
	"github.com/walq/walq/state"
)

// Config is one run of the harness.
type Config struct {
	Cycles int    // kill -9 cycles
	Seed   uint64 // 0: chosen from the clock (and printed)
	// Sync is "always", "interval:<duration>", "never", or "cycle": one of
	// always, interval:100ms and never drawn for each child.
	Sync      string
	PowerLoss bool // cut unsynced segment tails after each kill
	// PageLoss makes the power loss keep random pages of the unsynced range
	// and not others (zeros or garbage in their place), as a disk that
	// writes a page cache back out of order would; implies PowerLoss.
	PageLoss bool
	// StepClock steps each child's wall clock back and forward while it
	// runs, and starts each child's clock at an offset from the true time,
	// often behind the previous child's.
	StepClock bool
	Mix       Mix // the child's workload
	// SegmentSize of the queue under test; small, so segments roll often.
	// Under PageLoss each child gets it times 1, 4 or 16.
	SegmentSize int64
	// MaxRun bounds how long a child runs before it is killed.
	MaxRun time.Duration
	// Dir is where the queue and the child reports live; "" makes a
	// temporary directory, removed after a run without violations.
	Dir string
	// Child is the command that runs the child workload: a binary whose
	// main (or TestMain) calls ChildMain first. The harness adds the child's
	// configuration to its environment.
	Child []string
	// Log receives progress and violations; nil: discarded.
	Log func(format string, args ...any)
	// StopOnViolation ends the run after the first cycle that has one.
	StopOnViolation bool
	// Queues is the number of named queues the workload runs on besides
	// the default queue (0: the default queue only). Each child opens them
	// (q1, q2, ...), spreads its calls over all of them, pauses them (until
	// a time and until resumed) and deletes and re-creates them (queues.go).
	Queues int
	// IdleEvery runs the idle check (idle.go) after the first check of the
	// run, every IdleEvery-th check after it, and the check after the
	// final drain (0: every 8th; negative: never).
	IdleEvery int
	// LowDisk, when positive, puts the queue on a tmpfs of that many bytes
	// (Linux, root) and runs each child with Options.DiskWatermark at a
	// quarter of it and automatic compaction on: the producers meet the
	// watermark and their puts are refused (ErrDiskFull, reported as
	// refused and held to storing nothing) while consumers drain and
	// compaction frees the files. The queue must never fail itself: an
	// ErrFailed anywhere is a violation, as in every mode.
	LowDisk int64
}

// Mix is the child's workload: how many goroutines do what, and how often.
// Percentages are of the calls of one kind.
type Mix struct {
	Producers int // goroutines putting items
	Consumers int // goroutines getting, extending and ending leases
	Workers   int // workers of a q.Work call with a heartbeat (0: none)
	Slow      int // % of Work handlers that run longer than the visibility
	Hostile   int // % of items with a hostile body: random bytes or framed log records
	Large     int // % of items with a large body, 1 KiB to 256 KiB (bodies.go)
	Empty     int // % of items with an empty body (0 B), named by their key

	Batch    int // % of puts that are a PutBatch of 2-4 items
	Delay    int // % of items with a delay (up to 200ms)
	Deadline int // % of items with a deadline (0.3-1.5s after they are due)
	Key      int // % of items with an idempotency key from a small pool

	Extend int // % of leases extended once before they end
	// What ends a lease, in %: the rest abandon it to expire.
	Ack, Nack, DeadLetter int

	Compact time.Duration // pause between Compact calls (0: no explicit compaction)
	Redrive time.Duration // pause between dead-letter sweeps (0: none)
	Purge   int           // % of dead-letter sweeps that purge instead of redrive
}

// DefaultMix is the workload the tests and soak.sh run.
var DefaultMix = Mix{
	Producers: 2, Consumers: 2, Workers: 3, Slow: 10, Hostile: 10, Large: 2, Empty: 1,
	Batch: 20, Delay: 30, Deadline: 10, Key: 30,
	Extend: 20, Ack: 70, Nack: 12, DeadLetter: 5,
	Compact: 15 * time.Millisecond, Redrive: 40 * time.Millisecond, Purge: 25,
}

// ParseMix overrides fields of base from "name=value,..." (names are the
// lower-case field names; durations for compact and redrive).
func ParseMix(base Mix, s string) (Mix, error) {
	m := base
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			return m, fmt.Errorf("mix: %q is not name=value", kv)
		}
		if name == "compact" || name == "redrive" {
			d, err := time.ParseDuration(value)
			if err != nil {
				return m, fmt.Errorf("mix: %s: %w", name, err)
			}
			if name == "compact" {
				m.Compact = d
			} else {
				m.Redrive = d
			}
			continue
		}
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 {
			return m, fmt.Errorf("mix: %s=%q: want a count or percentage", name, value)
		}
		fields := map[string]*int{
			"producers": &m.Producers, "consumers": &m.Consumers, "workers": &m.Workers, "slow": &m.Slow,
			"hostile": &m.Hostile, "large": &m.Large, "empty": &m.Empty, "batch": &m.Batch, "delay": &m.Delay,
			"deadline": &m.Deadline, "key": &m.Key, "extend": &m.Extend, "ack": &m.Ack, "nack": &m.Nack,
			"deadletter": &m.DeadLetter, "purge": &m.Purge,
		}
		f, ok := fields[name]
		if !ok {
			return m, fmt.Errorf("mix: unknown name %q", name)
		}
		*f = n
	}
	if m.Ack+m.Nack+m.DeadLetter > 100 {
		return m, fmt.Errorf("mix: ack+nack+deadletter = %d%%, more than 100", m.Ack+m.Nack+m.DeadLetter)
	}
	if m.Large+m.Empty > 100 {
		return m, fmt.Errorf("mix: large+empty = %d%%, more than 100", m.Large+m.Empty)
	}
	if m.Producers < 1 || m.Consumers < 1 {
		return m, fmt.Errorf("mix: need at least one producer and one consumer")
	}
	return m, nil
}

// parseSync turns "always", "never" or "interval:50ms" into a policy and
// the interval (0 unless interval).
func parseSync(s string) (walq.SyncPolicy, time.Duration, error) {
	switch {
	case s == "" || s == "always":
		return walq.SyncAlways, 0, nil
	case s == "never":
		return walq.SyncNever, 0, nil
	case strings.HasPrefix(s, "interval"):
		d := 50 * time.Millisecond
		if v, ok := strings.CutPrefix(s, "interval:"); ok {
			var err error
			if d, err = time.ParseDuration(v); err != nil || d <= 0 {
				return walq.SyncPolicy{}, 0, fmt.Errorf("sync %q: want interval:<positive duration>", s)
			}
		}
		return walq.SyncInterval(d), d, nil
	}
	return walq.SyncPolicy{}, 0, fmt.Errorf("sync %q: want always, never or interval:<duration>", s)
}

// Queue options shared by the child and the parent's checks. The backoff
// is deterministic and short so that items come back within a cycle, and
// bounded by maxBackoff, which the ledger uses to tell whether a deadline
// discard was possible.
const (
	visibility  = 150 * time.Millisecond
	maxAttempts = 3
	keyWindow   = 300 * time.Millisecond
	maxBackoff  = 40 * time.Millisecond
	maxDelay    = 200 * time.Millisecond
)

func backoff(attempt int) time.Duration {
	return min(time.Duration(attempt)*10*time.Millisecond, maxBackoff)
}

func queueOptions(sync walq.SyncPolicy, segmentSize int64) walq.Options {
	return walq.Options{
		Visibility:  visibility,
		MaxAttempts: maxAttempts,
		Backoff:     backoff,
		SegmentSize: segmentSize,
		Sync:        sync,
		KeyWindow:   keyWindow,
		// Compaction runs when the child asks, so that it can report it.
		DisableAutoCompact: true,
	}
}

// queueName is the name of the i-th named queue of the workload.
func queueName(i int) string { return "q" + strconv.Itoa(i+1) }

// namedQueueOptions are the settings the workload gives the i-th named
// queue, each time it opens it: some of its own, so that a queue's
// recorded settings are seen to stay its own, some the directory's.
func namedQueueOptions(i int) walq.QueueOptions {
	return walq.QueueOptions{
		MaxAttempts: []int{2, 4, 0}[i%3],
		KeyWindow:   []time.Duration{200 * time.Millisecond, 0, 500 * time.Millisecond}[i%3],
		MaxInFlight: []int{0, 0, 6}[i%3],
	}
}

// queueIndex is the index of a named queue of the workload by its name
// (-1: not one of them).
func queueIndex(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "q"))
	if err != nil || !strings.HasPrefix(name, "q") || n < 1 || queueName(n-1) != name {
		return -1
	}
	return n - 1
}

// queueMaxAttempts is the MaxAttempts in effect on the named queue (or
// the default queue, for "").
func queueMaxAttempts(name string) int {
	if i := queueIndex(name); i >= 0 {
		if n := namedQueueOptions(i).MaxAttempts; n > 0 {
			return n
		}
	}
	return maxAttempts
}

// queueSettings are the settings a named queue of the workload must have
// recorded: its options with the directory's filled in.
func queueSettings(i int) state.Settings {
	o := namedQueueOptions(i)
	s := state.Settings{Visibility: int64(visibility), MaxAttempts: int64(queueMaxAttempts(queueName(i))),
		KeyWindow: int64(o.KeyWindow), MaxInFlight: int64(o.MaxInFlight)}
	if s.KeyWindow == 0 {
		s.KeyWindow = int64(keyWindow)
	}
	return s
}
