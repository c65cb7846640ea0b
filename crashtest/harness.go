package crashtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/walq/walq"
	"github.com/walq/walq/internal/rebuild"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Summary is the outcome of a run; String is the one-line summary that
// soak.sh prints.
type Summary struct {
	Seed              uint64
	Sync              string
	PowerLoss         bool
	PageLoss          bool
	StepClock         bool
	Cycles            int
	Kills             int // children killed (the others failed on their own)
	KillsInCompaction int // kills with a Compact call in flight
	KillsInRecovery   int // kills before the child's Open returned
	TailsCut          int // power losses that damaged the tail
	SegmentsDropped   int // power-loss: segment files removed
	PagesLost         int // page loss: unsynced pages that did not reach the disk
	UnsyncedBytes     int64
	// Holes counts power losses after which authentic frames lay past the
	// first damage (pages written back out of order), FramesPastHoles
	// those frames: what log format 1 could not tell from corruption.
	Holes, FramesPastHoles int
	// PolicyCycles counts the cycles run under each sync policy.
	PolicyCycles     map[string]int
	Refused          int // opens (the child's or the parent's) that failed
	Lost             int // promised items missing at a check
	Resurrected      int // items back after an ack, purge or absence that was final
	Checks           int // recoveries checked against the ledger
	Ops              int // completed calls whose outcome was checked
	ItemChecks       int // item-by-item comparisons of ledger and state
	LargeBodies      int // stored bodies over 4 KiB read back from disk at checks, byte for byte
	EmptyBodies      int // stored empty bodies checked
	BodyMiB          int // MiB of stored bodies read back and checked
	Drained          int // items the final drain delivered and acked
	ClockSteps       int // wall-clock steps the children made (start offsets apart)
	ClockBehind      int // children started with their wall clock behind the previous child's
	DeadlinesChecked int // stored deadlines checked exactly by span
	NotFoundChecked  int // ErrNotFound answers of redrives and purges held to the recovered state
	LowDisk          int64
	DiskRefused      int // puts refused with ErrDiskFull, held to storing nothing (LowDisk)
	WorkRuns         int // Work handler calls
	PoolRuns         int // WorkQueues handler calls
	// Starved counts lost leases and second runs under Work that came
	// while the child was starved longer than Visibility - HeartbeatEvery
	// (work.go): the one exception docs/workers.md states, not violations. StarvedSeen
	// keeps the first few.
	Starved     int
	StarvedSeen []string
	// The consumer watch in the children (consumers.go): queue reads,
	// those that showed Stats.Stalled and those that showed a consumer
	// stuck (moments, until the timer or a signalled Get acted), and the
	// longest a queue stayed stuck with its figures unchanged.
	WatchReads, WatchStalled, WatchStuck int
	WatchLongest                         time.Duration
	// The idle checks after recovery (idle.go): how many ran, and the most
	// rounds of the timer loop and of the committer one counted in its
	// window.
	IdleChecks                     int
	IdleTimerMax, IdleCommitterMax uint64
	// Named queues (Config.Queues): pause calls reported done, until a
	// time and until resumed, resumes, deletes (forced ones apart),
	// queues created again under a deleted name, queues found paused at a
	// check as the ledger allowed, incarnations found gone at a check
	// after a delete, and keys found held in several queues at once
	// (summed over checks).
	Queues                     int
	PausesTimed, PausesForever int
	Resumes                    int
	Deletes, DeletesForced     int
	Recreated                  int
	PausesHeld, DeletesHeld    int
	SharedKeys                 int
	Violations                 []string
	Dir                        string // kept when there are violations
	Elapsed                    time.Duration
}

func (s Summary) String() string {
	loss := "none"
	switch {
	case s.PageLoss:
		loss = "pages"
	case s.PowerLoss:
		loss = "cut"
	}
	queues := ""
	if s.LowDisk > 0 {
		queues = fmt.Sprintf(" lowdisk-kib=%d disk-refused=%d", s.LowDisk>>10, s.DiskRefused)
	}
	if s.Queues > 0 {
		queues += fmt.Sprintf(" queues=%d pauses-timed=%d pauses-forever=%d resumes=%d deletes=%d deletes-forced=%d recreated=%d "+
			"pauses-held=%d deletes-held=%d shared-keys=%d",
			s.Queues, s.PausesTimed, s.PausesForever, s.Resumes, s.Deletes, s.DeletesForced, s.Recreated,
			s.PausesHeld, s.DeletesHeld, s.SharedKeys)
	}
	return fmt.Sprintf("walq crashtest: seed=%d sync=%s powerloss=%s stepclock=%v cycles=%d kills=%d in-compaction=%d in-recovery=%d "+
		"tails-cut=%d segments-dropped=%d pages-lost=%d unsynced-kib=%d holes=%d frames-past-holes=%d checks=%d ops-checked=%d item-checks=%d "+
		"large-bodies=%d empty-bodies=%d body-mib=%d deadlines-checked=%d notfound-checked=%d clock-steps=%d clock-behind=%d work-runs=%d pool-runs=%d starved=%d%s "+
		"watch-reads=%d watch-stalled=%d watch-stuck=%d watch-longest=%s idle-checks=%d idle-timer-max=%d idle-committer-max=%d "+
		"drained=%d refused=%d lost=%d resurrected=%d violations=%d elapsed=%s cycles-per-sec=%.2f",
		s.Seed, s.syncString(), loss, s.StepClock, s.Cycles, s.Kills, s.KillsInCompaction, s.KillsInRecovery, s.TailsCut,
		s.SegmentsDropped, s.PagesLost, s.UnsyncedBytes>>10, s.Holes, s.FramesPastHoles, s.Checks, s.Ops, s.ItemChecks,
		s.LargeBodies, s.EmptyBodies, s.BodyMiB,
		s.DeadlinesChecked, s.NotFoundChecked, s.ClockSteps, s.ClockBehind, s.WorkRuns, s.PoolRuns, s.Starved, queues,
		s.WatchReads, s.WatchStalled, s.WatchStuck, s.WatchLongest.Round(time.Millisecond), s.IdleChecks, s.IdleTimerMax, s.IdleCommitterMax, s.Drained, s.Refused, s.Lost, s.Resurrected,
		len(s.Violations), s.Elapsed.Round(time.Second), s.rate())
}

func (s Summary) rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Cycles) / s.Elapsed.Seconds()
}

// syncString is the policy, or for a run that changes it per cycle the
// cycles under each.
func (s Summary) syncString() string {
	if len(s.PolicyCycles) < 2 {
		return s.Sync
	}
	out := s.Sync + "("
	for i, p := range cyclePolicies {
		if i > 0 {
			out += ","
		}
		out += fmt.Sprintf("%s:%d", p, s.PolicyCycles[p])
	}
	return out + ")"
}

// cyclePolicies are the policies of Config.Sync "cycle", one drawn for
// each child.
var cyclePolicies = []string{"always", "interval:100ms", "never"}

type harness struct {
	cfg      Config
	policies []string        // Config.Sync, or cyclePolicies
	sync     walq.SyncPolicy // the policy of the cycle under way
	// syncEvery is its interval (SyncInterval; 0 otherwise).
	syncEvery time.Duration
	rng       *rand.Rand
	root      string
	queueDir  string
	led       *ledger
	sum       Summary
	// floor is an LSN that is durable whatever happens next: every record
	// on the disk when the next child starts (what the last power loss
	// left, or the end of the log at the parent's last clean close).
	floor uint64
	// offset is the last wall-clock offset of the previous child (StepClock).
	offset time.Duration
	logf   func(format string, args ...any)
}

// Run runs the harness: cycles of start child, kill -9 at a random moment,
// optionally simulate a power loss, recover and check; then drain the
// queue and check once more. A run with violations keeps its directory.
func Run(cfg Config) (Summary, error) {
	start := time.Now()
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.SegmentSize == 0 {
		cfg.SegmentSize = 8 << 10
	}
	if cfg.MaxRun == 0 {
		cfg.MaxRun = 400 * time.Millisecond
	}
	if cfg.Mix.Producers == 0 {
		cfg.Mix = DefaultMix
	}
	if cfg.PageLoss {
		cfg.PowerLoss = true
	}
	if cfg.IdleEvery == 0 {
		cfg.IdleEvery = 8
	}
	if len(cfg.Child) == 0 {
		return Summary{}, errors.New("crashtest: Config.Child is empty")
	}
	policies := []string{cfg.Sync}
	if cfg.Sync == "cycle" {
		policies = cyclePolicies
	}
	for _, p := range policies {
		if _, _, err := parseSync(p); err != nil {
			return Summary{}, err
		}
	}
	sync, every, _ := parseSync(policies[0])
	h := &harness{cfg: cfg, policies: policies, sync: sync, syncEvery: every, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), led: newLedger(), logf: cfg.Log}
	if h.logf == nil {
		h.logf = func(string, ...any) {}
	}
	h.sum = Summary{Seed: cfg.Seed, Sync: sync.String(), PowerLoss: cfg.PowerLoss, PageLoss: cfg.PageLoss, StepClock: cfg.StepClock,
		PolicyCycles: make(map[string]int), Queues: cfg.Queues, LowDisk: cfg.LowDisk}
	if cfg.Sync == "cycle" {
		h.sum.Sync = "cycle"
	}
	h.root = cfg.Dir
	if h.root == "" {
		var err error
		if h.root, err = os.MkdirTemp("", "walq-crashtest-"); err != nil {
			return h.sum, err
		}
	}
	h.queueDir = filepath.Join(h.root, "queue")
	if err := os.MkdirAll(filepath.Join(h.root, "reports"), 0o700); err != nil {
		return h.sum, err
	}
	var unmount func() error // the low disk's, until it is unmounted
	if cfg.LowDisk > 0 {
		var err error
		if unmount, err = mountLowDisk(h.queueDir, cfg.LowDisk); err != nil {
			return h.sum, err
		}
		defer func() {
			if unmount != nil {
				// A run that found a violation or stopped early keeps its
				// directory: the queue's files are copied out of the tmpfs
				// first (.broken copies aside).
				kept := filepath.Join(h.root, "queue.kept")
				if err := copyTree(h.queueDir, kept); err != nil {
					h.logf("crashtest: copy the queue to %s: %v", kept, err)
				}
				unmount()
			}
		}()
	}
	h.logf("crashtest: seed %d, sync %s, power loss %v (pages %v), %d cycles, dir %s", cfg.Seed, h.sum.Sync, cfg.PowerLoss, cfg.PageLoss, cfg.Cycles, h.root)

	for cycle := 1; cycle <= cfg.Cycles; cycle++ {
		h.sum.Cycles = cycle
		if err := h.cycle(cycle); err != nil {
			return h.finish(start), fmt.Errorf("crashtest: seed %d cycle %d: %w (directory kept: %s)", cfg.Seed, cycle, err, h.root)
		}
		if len(h.led.violations) > 0 && cfg.StopOnViolation {
			break
		}
	}
	if len(h.led.violations) == 0 || !cfg.StopOnViolation {
		if err := h.drain(); err != nil {
			return h.finish(start), fmt.Errorf("crashtest: seed %d drain: %w (directory kept: %s)", cfg.Seed, err, h.root)
		}
	}
	sum := h.finish(start)
	if unmount != nil && len(sum.Violations) == 0 {
		if err := unmount(); err != nil {
			h.logf("crashtest: unmount %s: %v", h.queueDir, err)
		}
		unmount = nil
	}
	if len(sum.Violations) == 0 && cfg.Dir == "" {
		os.RemoveAll(h.root)
	}
	return sum, nil
}

// startOffset chooses where the next child's wall clock starts: most
// often behind where the previous child's ended, by a second to an hour
// (a clock stepped back across a restart), otherwise anywhere within
// maxOffset of the true time.
func (h *harness) startOffset() time.Duration {
	if h.rng.IntN(3) > 0 {
		back := randomStep(h.rng, h.offset)
		if back > 0 {
			back = -back
		}
		return max(h.offset+back, -maxOffset)
	}
	return randDuration(h.rng, 2*maxOffset) - maxOffset
}

func (h *harness) finish(start time.Time) Summary {
	h.sum.Ops = h.led.opsChecked
	h.sum.ItemChecks = h.led.itemsChecked
	h.sum.LargeBodies, h.sum.EmptyBodies, h.sum.BodyMiB = h.led.largeChecked, h.led.emptyChecked, int(h.led.bodyBytesChecked>>20)
	h.sum.DeadlinesChecked = h.led.deadlinesChecked
	h.sum.NotFoundChecked = h.led.notFoundChecked
	h.sum.DiskRefused = h.led.diskRefused
	h.sum.WorkRuns = h.led.workRuns
	h.sum.PoolRuns = h.led.poolRuns
	h.sum.KillsInCompaction = h.led.compactionsCut
	h.sum.Violations = h.led.violations
	h.sum.Lost = h.led.lost
	h.sum.Starved = len(h.led.starved)
	h.sum.StarvedSeen = h.led.starved[:min(len(h.led.starved), 5)]
	h.sum.Resurrected = h.led.resurrected
	qc := h.led.qsum
	h.sum.PausesTimed, h.sum.PausesForever, h.sum.Resumes = qc.pausesTimed, qc.pausesForever, qc.resumes
	h.sum.Deletes, h.sum.DeletesForced, h.sum.Recreated = qc.deletes, qc.deletesForced, qc.recreated
	h.sum.PausesHeld, h.sum.DeletesHeld, h.sum.SharedKeys = qc.pausesHeld, qc.deletesHeld, qc.sharedKeys
	h.sum.Dir = h.root
	h.sum.Elapsed = time.Since(start)
	return h.sum
}

// cycle runs one child to its kill and checks what it left.
func (h *harness) cycle(cycle int) error {
	reportPath := filepath.Join(h.root, "reports", fmt.Sprintf("cycle-%05d.log", cycle))
	policy := h.policies[h.rng.IntN(len(h.policies))]
	h.sync, h.syncEvery, _ = parseSync(policy)
	h.sum.PolicyCycles[policy]++
	segSize := h.cfg.SegmentSize
	if h.cfg.PageLoss {
		// Some children get longer segments, so that what is unsynced at the
		// kill spans many pages and can come back with holes inside.
		segSize *= []int64{1, 4, 16}[h.rng.IntN(3)]
	}
	ccfg := childConfig{Dir: h.queueDir, Report: reportPath, Seed: h.rng.Uint64(), Cycle: cycle,
		Sync: policy, SegmentSize: segSize, Mix: h.cfg.Mix, Queues: h.cfg.Queues, Watermark: h.cfg.LowDisk / 4}
	if h.cfg.StepClock {
		ccfg.StepClock = true
		ccfg.WallOffset = h.startOffset()
		if ccfg.WallOffset < h.offset {
			h.sum.ClockBehind++
		}
		h.offset = ccfg.WallOffset
	}
	env, err := json.Marshal(ccfg)
	if err != nil {
		return err
	}
	cmd := exec.Command(h.cfg.Child[0], h.cfg.Child[1:]...)
	// A child built with -race (the test binary under go test -race) stops
	// at its first data race, which the parent then reports.
	cmd.Env = append(os.Environ(), childEnv+"="+string(env), "GORACE=halt_on_error=1")
	stderrPath := strings.TrimSuffix(reportPath, ".log") + ".stderr"
	stderr, err := os.Create(stderrPath)
	if err != nil {
		return err
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start child: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
				break
			}
		}
		for sc.Scan() {
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// Most kills come while the workload runs; some while the child is still
	// starting up and recovering.
	var timer <-chan time.Time
	if h.rng.IntN(100) < 15 {
		timer = time.After(randDuration(h.rng, 60*time.Millisecond))
	} else {
		select {
		case <-ready:
			timer = time.After(randDuration(h.rng, h.cfg.MaxRun))
		case <-time.After(30 * time.Second):
			timer = time.After(0)
		case err := <-exited:
			exited <- err
			timer = time.After(0)
		}
	}
	var waitErr error
	select {
	case <-timer:
		cmd.Process.Signal(syscall.SIGKILL)
		waitErr = <-exited
	case waitErr = <-exited:
	}
	killed := false
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			killed = true
		}
	}
	if killed {
		h.sum.Kills++
	} else {
		msg, _ := os.ReadFile(stderrPath)
		h.led.violate("cycle %d: child ended by itself (%v): %s", cycle, waitErr, truncate(msg, 2000))
	}

	data, err := os.ReadFile(reportPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) { // killed before it opened its report
		return err
	}
	events, err := parseReport(data)
	if err != nil {
		return err
	}
	// A power loss may damage what was not shown fsynced, and only the
	// calls whose records were are promised (powerloss.go).
	trusted := func(event) bool { return true }
	var point fsyncedPoint
	if h.cfg.PowerLoss {
		point, err = h.fsynced(events, policy == "always")
		if err != nil {
			return err
		}
		trusted = func(ev event) bool { return ev.dlsn <= point.lsn }
	}
	rep := h.led.ingest(events, trusted)
	if !rep.ready {
		h.sum.KillsInRecovery++
	}
	if rep.refused {
		h.sum.Refused++
	}
	h.sum.ClockSteps += rep.clockSteps
	h.sum.WatchReads += int(rep.watch[0])
	h.sum.WatchStalled += int(rep.watch[1])
	h.sum.WatchStuck += int(rep.watch[2])
	h.sum.WatchLongest = max(h.sum.WatchLongest, time.Duration(rep.watch[3]))
	if rep.stepped {
		h.offset = time.Duration(rep.offset)
	}
	if h.cfg.PowerLoss {
		what, err := h.powerLoss(point)
		if err != nil {
			h.led.violate("cycle %d (sync %s): power loss with LSN %d fsynced: %v", cycle, policy, point.lsn, err)
		}
		h.logf("cycle %d (sync %s): power loss: %s", cycle, policy, what)
	}
	// Most cycles are checked; some leave the recovery to the next child,
	// so that kills also land in a recovery with work to do.
	if cycle < h.cfg.Cycles && h.rng.IntN(4) == 0 {
		return nil
	}
	n, err := h.check(fmt.Sprintf("cycle %d", cycle))
	if err != nil {
		return err
	}
	if n > 0 {
		h.logf("cycle %d: %d violations (seed %d, directory %s):\n  %s", cycle, n, h.cfg.Seed, h.root,
			strings.Join(h.led.violations[len(h.led.violations)-n:], "\n  "))
	}
	return nil
}

// check recovers the queue, compares what Open reports of each queue with
// what the directory replays to, and holds the ledger against it.
func (h *harness) check(where string) (int, error) {
	h.sum.Checks++
	before := len(h.led.violations)
	opts := queueOptions(h.sync, h.cfg.SegmentSize)
	q, err := walq.Open(h.queueDir, opts)
	if err != nil {
		h.sum.Refused++
		h.led.violate("%s: recovery failed: %v", where, err)
		return len(h.led.violations) - before, nil
	}
	st := q.Stats()
	infos, err := q.Queues()
	if err != nil {
		h.led.violate("%s: Queues after recovery: %v", where, err)
	}
	// Each queue's dead letters, through a handle opened with the settings
	// the workload gives it (so that opening it writes nothing).
	dead := make(map[uint64][]walq.DeadLetter)
	for _, info := range infos {
		if info.Name == "" {
			dead[info.ID] = q.DeadLetters(0)
			continue
		}
		i := queueIndex(info.Name)
		if i < 0 {
			continue // the ledger reports it
		}
		hq, err := q.OpenQueue(info.Name, namedQueueOptions(i))
		if err != nil {
			h.led.violate("%s: open queue %s after recovery: %v", where, info.Name, err)
			continue
		}
		dead[info.ID] = hq.DeadLetters(0)
		hq.Close()
	}
	if err := q.Close(); err != nil {
		h.led.violate("%s: close after recovery: %v", where, err)
	}
	lsns := []uint64{st.LastLSN}
	for _, info := range infos {
		lsns = append(lsns, info.Stats.LastLSN)
	}
	ds, err := verifyDir(h.queueDir, lsns...)
	if err != nil {
		h.led.violate("%s: directory does not verify: %v", where, err)
		return len(h.led.violations) - before, nil
	}
	h.floor = max(h.floor, ds.last, ds.snapshotLSN)
	// The timer may have discarded an item between a Stats and Close:
	// compare with the replay as it stood at the LSN that Stats reported.
	h.compareStats(where, "the default queue", 0, st, ds)
	listed := make(map[uint64]bool)
	for _, info := range infos {
		listed[info.ID] = true
		what := fmt.Sprintf("queue %q (incarnation %d)", info.Name, info.ID)
		h.compareStats(where, what, info.ID, info.Stats, ds)
		qs := ds.st.Queue(info.ID)
		if qs == nil {
			h.led.violate("%s: Queues lists %s, the replayed directory does not have it", where, what)
			continue
		}
		if n := len(dead[info.ID]); n != qs.Gauges().Dead {
			h.led.violate("%s: DeadLetters of %s lists %d, the state has %d", where, what, n, qs.Gauges().Dead)
		}
		for _, d := range dead[info.ID] {
			if e := h.led.entries[itemToken(d.Body, d.Key)]; e == nil || e.queue != info.ID || !checkBody(e.tok, d.Body) {
				h.led.violate("%s: DeadLetters of %s lists item %d (%q), which was not put into it", where, what, d.ID, truncate(d.Body, 40))
			}
		}
		switch until := qs.PausedUntil(); {
		case until == 0 && (info.Paused || !info.PausedUntil.IsZero()),
			until == math.MaxInt64 && (!info.Paused || !info.PausedUntil.IsZero()),
			until != 0 && until != math.MaxInt64 && info.PausedUntil.IsZero():
			h.led.violate("%s: Queues says %s is paused %v until %v, its recorded pause ends at %d", where, what,
				info.Paused, info.PausedUntil, until)
		}
	}
	for _, qs := range ds.st.Queues() {
		if !listed[qs.ID()] {
			h.led.violate("%s: the replayed directory has queue %q (%d), Queues did not list it", where, qs.Name(), qs.ID())
		}
	}
	bodies := rebuild.NewBodies(h.queueDir)
	defer bodies.Close()
	h.led.check(ds.st, func(it *state.Item) ([]byte, error) { return bodies.Body(ds.st, it) }, where)
	if h.idleDue(where) {
		if err := h.idleCheck(where); err != nil {
			return 0, err
		}
	}
	return len(h.led.violations) - before, nil
}

// compareStats holds what the recovered queue id reported in st against
// the replay at the LSN st reports.
func (h *harness) compareStats(where, what string, id uint64, st walq.Stats, ds *dirState) {
	if ds.snapshotLSN > st.LastLSN {
		// A snapshot covers past it (Close writes one when replaying the
		// log would cost more): the state at that LSN can no longer be
		// rebuilt, and the check of the state as recovered (ledger.check)
		// is what remains.
		return
	}
	f, ok := ds.at[st.LastLSN][id]
	g, c := f.gauges, f.counters
	live := [...]uint64{uint64(st.Ready + st.Delayed), uint64(st.Leased), uint64(st.Dead), uint64(st.Items), uint64(st.Bytes),
		st.Put, st.Delivered, st.Acked, st.Nacked, st.Expired, st.DeadLettered, st.Discarded, st.Redriven, st.Purged}
	replayed := [...]uint64{uint64(g.Ready + g.Delayed), uint64(g.Leased), uint64(g.Dead), uint64(g.Items), uint64(g.Bytes),
		c.Put, c.Delivered, c.Acked, c.Nacked, c.Expired, c.DeadLettered, c.Discarded, c.Redriven, c.Purged}
	if !ok || live != replayed {
		h.led.violate("%s: %s as recovered at LSN %d and the directory replayed to it differ (replay reached it: %v):\n    queue  %v\n    replay %v"+
			" (waiting leased dead items bytes put delivered acked nacked expired deadlettered discarded redriven purged)",
			where, what, st.LastLSN, ds.at[st.LastLSN] != nil, live, replayed)
	}
	if st.Leased != 0 {
		h.led.violate("%s: %s: %d leases open after recovery", where, what, st.Leased)
	}
}

// drain empties every queue through the public API, resuming the paused
// ones, acking everything and redriving dead letters, then checks that
// nothing is left and nothing came back.
func (h *harness) drain() error {
	if _, err := h.check("before drain"); err != nil {
		return err
	}
	opts := queueOptions(h.sync, h.cfg.SegmentSize)
	opts.Visibility = time.Minute // a slow fsync must not cost the drain its lease
	q, err := walq.Open(h.queueDir, opts)
	if err != nil {
		h.sum.Refused++
		h.led.violate("drain: open: %v", err)
		return nil
	}
	infos, err := q.Queues()
	if err != nil {
		h.led.violate("drain: queues: %v", err)
	}
	type drainQueue struct {
		h  *walq.Queue
		id uint64
	}
	var queues []drainQueue
	for _, info := range infos {
		hq := q
		if info.Name != "" {
			i := queueIndex(info.Name)
			if i < 0 {
				continue
			}
			if hq, err = q.OpenQueue(info.Name, namedQueueOptions(i)); err != nil {
				h.led.violate("drain: open queue %s: %v", info.Name, err)
				continue
			}
		}
		if err := hq.Resume(); err != nil {
			h.led.violate("drain: resume %s: %v", info.Name, err)
		} else if inc := h.led.queues[info.ID]; inc != nil {
			inc.pauses = []*pauseOp{{kind: 'r'}}
		}
		queues = append(queues, drainQueue{hq, info.ID})
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		got := false
		for _, dq := range queues {
			if dead := dq.h.DeadLetters(0); len(dead) > 0 {
				ids := make([]uint64, len(dead))
				for i, d := range dead {
					ids[i] = d.ID
					e := h.led.lookup(itemToken(d.Body, d.Key), "redrive")
					e.redrives++
					e.expectDead = false
				}
				if err := dq.h.Redrive(ids...); err != nil {
					h.led.violate("drain: redrive: %v", err)
					deadline = time.Time{}
				}
			}
			m, ok, err := dq.h.TryGet()
			if err != nil {
				h.led.violate("drain: get: %v", err)
				deadline = time.Time{}
				break
			}
			if !ok {
				continue
			}
			got = true
			h.led.drained(itemToken(m.Body, m.Key), dq.id, m.Attempt, m.Deliveries)
			h.sum.Drained++
			if err := dq.h.Ack(m.Receipt); err != nil {
				h.led.violate("drain: ack %d: %v", m.ID, err)
			}
		}
		if !got {
			if q.DirStats().Items == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond) // delayed items, backoffs
		}
	}
	if st := q.DirStats(); st.Items != 0 {
		h.led.violate("drain: %d items left after a minute of draining", st.Items)
	}
	if err := q.Close(); err != nil {
		h.led.violate("drain: close: %v", err)
	}
	if _, err := h.check("after drain"); err != nil {
		return err
	}
	for tok, e := range h.led.entries {
		if !e.gone && e.put != putRefused {
			h.led.violate("after drain: item %s neither gone nor stored", tok)
		}
	}
	return nil
}

func listSnapshotLSNs(dir string) ([]uint64, error) {
	snaps, err := wal.ListSnapshots(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var lsns []uint64
	for _, s := range snaps {
		lsns = append(lsns, s.LSN)
	}
	return lsns, err
}
