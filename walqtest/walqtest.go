package walqtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq"
)

// Queue is what the suite drives: an Engine, and the calls that fill it and
// look at its dead letters.
type Queue interface {
	walq.Engine
	// Put stores an item and returns its ID, which the engine chooses.
	// The PutOptions set fields of a walq.Item; an engine applies them to
	// a zero Item to read them. A key already held returns the holder's
	// ID and an error wrapping walq.ErrDuplicate; a deadline not after the
	// item is due, one wrapping walq.ErrInvalidDeadline.
	Put(ctx context.Context, body []byte, opts ...walq.PutOption) (uint64, error)
	// TryGet leases the next ready item if there is one, without waiting
	// for one.
	TryGet() (walq.Message, bool, error)
	// DeadLetters returns up to limit dead letters (limit <= 0: all),
	// oldest first.
	DeadLetters(limit int) ([]walq.DeadLetter, error)
	// Redrive puts dead letters back as ready items with their attempts
	// reset; PurgeDeadLetters deletes them. An ID that is not a dead
	// letter gives an error wrapping walq.ErrNotFound.
	Redrive(ids ...uint64) error
	PurgeDeadLetters(ids ...uint64) error
	// Close releases the queue; its items stay stored when the engine
	// declares Capabilities.Reopen.
	Close() error
}

// Config is what the suite asks of a queue it opens. An engine maps each
// field onto its own settings; one it cannot honour must make Open fail
// with an error that says which.
type Config struct {
	// Visibility is how long a lease lasts unless extended.
	Visibility time.Duration
	// MaxAttempts is how many leases an item gets before a failure
	// dead-letters it.
	MaxAttempts int
	// Backoff gives the wait before attempt+1 after attempt ended in a
	// nack or an expired lease.
	Backoff func(attempt int) time.Duration
	// KeyWindow is how long a key stays held after its item is acked.
	KeyWindow time.Duration
	// Clock is the clock the queue must run on: a *walq.ManualClock for
	// engines that declare Capabilities.ManualClock, nil (the system
	// clock) otherwise and in the behaviours that need real time.
	Clock walq.Clock
}

// Capabilities declare what an engine offers beyond Queue. A behaviour
// that needs one the engine lacks is skipped, and the skip says which.
type Capabilities struct {
	// ManualClock: Open honours Config.Clock, and every time the queue
	// measures (leases, delays, backoff, deadlines, key windows) runs on
	// it. Without it the time-based behaviours run in real time, slower.
	ManualClock bool
	// Reopen: a queue closed and opened again with the same name keeps its
	// items, attempts, dead letters and keys.
	Reopen bool
	// Processes: a queue can be opened by name in another process once the
	// one before has died (killed, its handle never closed).
	Processes bool
	// Priority: WithPriority orders ready items, smaller first.
	Priority bool
	// Keys: WithKey makes puts idempotent for Config.KeyWindow after the
	// item is acked.
	Keys bool
	// Deadlines: WithDeadline discards an item, never delivering it, once
	// its deadline passes.
	Deadlines bool
	// RecordedSettings: a queue keeps the Visibility and MaxAttempts it
	// was created with. Open with a zero Config.Visibility or MaxAttempts
	// opens it with those; Open with one that differs fails with an error
	// wrapping walq.ErrInvalid and changes nothing.
	RecordedSettings bool
}

// Target is an engine under test.
type Target struct {
	// Open opens the queue called name with cfg. Every name the suite
	// makes is new, so the first Open of a name must give an empty queue;
	// a name is also the path of an empty directory of its own, for
	// engines that keep files. The suite opens a name again only after
	// closing it (or, for Capabilities.Processes, after the process that
	// held it died), with the same cfg (for Capabilities.RecordedSettings
	// also with a zero or a differing Visibility or MaxAttempts).
	Open func(name string, cfg Config) (Queue, error)
	// Caps declares what the engine offers.
	Caps Capabilities
	// Quick leaves out the behaviours that take seconds of real time
	// whatever the clock (ReferenceScenario, about 25 s, and KilledWorker,
	// which starts a process and kills it), for a test run that must stay
	// short. They are skipped with the reason; a full run needs them.
	Quick bool
}

// behaviour is one subtest of Run.
type behaviour struct {
	name  string
	needs []capability
	run   func(t *testing.T, tg Target)
	// slow: the behaviour takes seconds of real time on any clock.
	slow bool
}

type capability struct {
	name string
	has  func(Capabilities) bool
}

var (
	capReopen    = capability{"Reopen", func(c Capabilities) bool { return c.Reopen }}
	capProcesses = capability{"Processes", func(c Capabilities) bool { return c.Processes }}
	capPriority  = capability{"Priority", func(c Capabilities) bool { return c.Priority }}
	capKeys      = capability{"Keys", func(c Capabilities) bool { return c.Keys }}
	capDeadlines = capability{"Deadlines", func(c Capabilities) bool { return c.Deadlines }}
	capSettings  = capability{"RecordedSettings", func(c Capabilities) bool { return c.RecordedSettings }}
)

// behaviours in the order Run runs them.
var behaviours = []behaviour{
	{name: "ReferenceScenario/Work", run: testScenarioWork, slow: true},
	{name: "ReferenceScenario/NoHeartbeat", run: testScenarioNoHeartbeat, slow: true},
	{name: "AckEndsItem", run: testAckEndsItem},
	{name: "ExtendHoldsLease", run: testExtendHoldsLease},
	{name: "StaleReceiptAfterExpiry", run: testStaleAfterExpiry},
	{name: "StaleReceiptAfterRedrive", run: testStaleAfterRedrive},
	{name: "NackBackoff", run: testNackBackoff},
	{name: "AttemptsCountedAtLease", run: testAttemptsAtLease},
	{name: "AttemptsCountedAcrossReopen", needs: []capability{capReopen}, run: testAttemptsAcrossReopen},
	{name: "DeadLetterCauseAndAttempts", run: testDeadLetters},
	{name: "Redrive", run: testRedrive},
	{name: "Purge", run: testPurge},
	{name: "DelayNeverEarly", run: testDelayNeverEarly},
	{name: "EarlierInsertWakesConsumer", run: testEarlierInsertWakes},
	{name: "DeadlineAfterDelay", needs: []capability{capDeadlines}, run: testDeadlineAfterDelay},
	{name: "PriorityThenReadyOrder", needs: []capability{capPriority}, run: testPriorityOrder},
	{name: "KeysAcrossReopen", needs: []capability{capKeys, capReopen}, run: testKeysAcrossReopen},
	{name: "OpeningKeepsSettings", needs: []capability{capSettings, capReopen}, run: testSettingsKept},
	{name: "KilledWorker", needs: []capability{capProcesses}, run: testKilledWorker, slow: true},
}

// Run runs each behaviour as a subtest of t, on queues tg.Open makes. A
// behaviour that needs a capability tg does not declare is skipped with
// the reason. Run is also the entry point of the worker process that
// KilledWorker starts: that process runs the same test binary and test, so
// tg must be the same there.
func Run(t *testing.T, tg Target) {
	t.Helper()
	if tg.Open == nil {
		t.Fatal("walqtest: Target.Open is nil")
	}
	for _, b := range behaviours {
		t.Run(b.name, func(t *testing.T) {
			if b.slow && tg.Quick {
				t.Skipf("walqtest: Target.Quick leaves out %s, which takes seconds of real time", b.name)
			}
			for _, c := range b.needs {
				if !c.has(tg.Caps) {
					t.Skipf("walqtest: the engine does not declare Capabilities.%s, which %s needs", c.name, b.name)
				}
			}
			if b.slow {
				// One at a time in a process: targets run side by side
				// (t.Parallel) would starve each other's heartbeats on
				// a small machine, and a failure would be the machine's.
				slowMu.Lock()
				defer slowMu.Unlock()
			}
			b.run(t, tg)
		})
	}
}

// slowMu lets one slow behaviour run at a time in a process: they measure
// an engine in real time.
var slowMu sync.Mutex

// env is one behaviour's queue and the time it runs on.
type env struct {
	t     *testing.T
	tg    Target
	name  string
	cfg   Config
	clock *walq.ManualClock // nil: real time
	q     Queue
	// unit is the behaviour's time scale: long on a manual clock (time
	// passes only when told), a quarter of a second in real time, so that
	// a loaded machine does not move events across the bounds.
	unit time.Duration
}

// newEnv opens a fresh queue for t. cfg's durations are in units, written
// as seconds: 1s is env.unit. A queue whose engine declares ManualClock
// runs on one.
func newEnv(t *testing.T, tg Target, cfg Config) *env {
	t.Helper()
	e := &env{t: t, tg: tg, name: t.TempDir(), unit: 250 * time.Millisecond}
	if tg.Caps.ManualClock {
		e.clock = walq.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		e.unit = 10 * time.Second
		cfg.Clock = e.clock
	}
	scale := func(d time.Duration) time.Duration {
		return time.Duration(float64(d) / float64(time.Second) * float64(e.unit))
	}
	cfg.Visibility = scale(cfg.Visibility)
	cfg.KeyWindow = scale(cfg.KeyWindow)
	if b := cfg.Backoff; b != nil {
		cfg.Backoff = func(attempt int) time.Duration { return scale(b(attempt)) }
	}
	return e.start(cfg)
}

// newRealEnv opens a fresh queue for t on the system clock, with cfg's
// durations as they are.
func newRealEnv(t *testing.T, tg Target, cfg Config) *env {
	t.Helper()
	e := &env{t: t, tg: tg, name: t.TempDir(), unit: time.Second}
	return e.start(cfg)
}

func (e *env) start(cfg Config) *env {
	e.t.Helper()
	e.cfg = cfg
	e.open()
	e.t.Cleanup(func() {
		if e.q != nil {
			if err := e.q.Close(); err != nil {
				e.t.Errorf("close: %v", err)
			}
		}
	})
	return e
}

// units turns a count of units into a duration.
func (e *env) units(n float64) time.Duration { return time.Duration(n * float64(e.unit)) }

func (e *env) open() {
	e.t.Helper()
	q, err := e.tg.Open(e.name, e.cfg)
	if err != nil {
		e.t.Fatalf("open %s: %v", e.name, err)
	}
	if q == nil {
		e.t.Fatalf("open %s: Target.Open returned a nil Queue and no error", e.name)
	}
	e.q = q
}

// reopen closes the queue and opens it again.
func (e *env) reopen() {
	e.t.Helper()
	q := e.q
	e.q = nil
	if err := q.Close(); err != nil {
		e.t.Fatalf("close before reopen: %v", err)
	}
	e.open()
}

// reopenWith closes the queue and opens it again with cfg (durations as
// they are, the clock the queue runs on): the queue's Config from then on.
func (e *env) reopenWith(cfg Config) {
	e.t.Helper()
	cfg.Clock = e.cfg.Clock
	e.cfg = cfg
	e.reopen()
}

// now is the queue's wall time: the manual clock's, or the system's.
func (e *env) now() time.Time {
	if e.clock != nil {
		return e.clock.Now()
	}
	return time.Now()
}

// advance lets d pass: on the manual clock at once, in real time by
// waiting.
func (e *env) advance(d time.Duration) {
	if e.clock != nil {
		e.clock.Advance(d)
		return
	}
	time.Sleep(d)
}

func (e *env) put(body string, opts ...walq.PutOption) uint64 {
	e.t.Helper()
	id, err := e.q.Put(context.Background(), []byte(body), opts...)
	if err != nil {
		e.t.Fatalf("put %q: %v", body, err)
	}
	return id
}

// waitLimit bounds every wait for something that must happen: generous,
// since a loaded machine may be slow, and only reached when it never does.
const waitLimit = 20 * time.Second

// get waits for the next item. On a manual clock nothing moves time, so
// the item must be ready already or become ready by the engine's own work
// (a lease it expires, a timer it fires).
func (e *env) get(what string) walq.Message {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	m, err := e.q.Get(ctx)
	if err != nil {
		e.t.Fatalf("%s: Get: %v", what, err)
	}
	return m
}

// getID waits for the next item and checks it is id.
func (e *env) getID(what string, id uint64) walq.Message {
	e.t.Helper()
	m := e.get(what)
	if m.ID != id {
		e.t.Fatalf("%s: got item %d (%q), want %d", what, m.ID, m.Body, id)
	}
	return m
}

// quietFor is how long a check that something does not happen watches for
// it: engines may apply expiries on their own goroutines after the clock
// moved.
const quietFor = 100 * time.Millisecond

// none checks that no item is delivered: none is ready now, and (since an
// engine may expire a lease on its own goroutine after the clock moved)
// none becomes ready within quietFor.
func (e *env) none(what string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), quietFor)
	defer cancel()
	m, ok, err := e.q.TryGet()
	if err == nil && !ok {
		m, err = e.q.Get(ctx)
		ok = err == nil
		if errors.Is(err, context.DeadlineExceeded) {
			err = nil
		}
	}
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
	if ok {
		e.t.Fatalf("%s: item %d (%q, attempt %d) was delivered, want none", what, m.ID, m.Body, m.Attempt)
	}
}

// noneNow checks that TryGet finds nothing ready at this moment.
func (e *env) noneNow(what string) {
	e.t.Helper()
	m, ok, err := e.q.TryGet()
	if err != nil {
		e.t.Fatalf("%s: TryGet: %v", what, err)
	}
	if ok {
		e.t.Fatalf("%s: item %d (%q, attempt %d) was delivered, want none", what, m.ID, m.Body, m.Attempt)
	}
}

// deadLetters lists the dead letters by ID.
func (e *env) deadLetters() map[uint64]walq.DeadLetter {
	e.t.Helper()
	dl, err := deadLettersByID(e.q)
	if err != nil {
		e.t.Fatalf("DeadLetters: %v", err)
	}
	return dl
}

func deadLettersByID(q Queue) (map[uint64]walq.DeadLetter, error) {
	dl, err := q.DeadLetters(0)
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]walq.DeadLetter, len(dl))
	for _, d := range dl {
		out[d.ID] = d
	}
	return out, nil
}

// eventually waits until cond holds, checking it every few milliseconds:
// for what an engine does on its own time (expiring a lease, moving an
// item to the dead letters).
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	eventuallyWithin(t, what, waitLimit, cond)
}

func eventuallyWithin(t *testing.T, what string, limit time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mustLost checks that err says the lease was lost.
func mustLost(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, walq.ErrLeaseLost) {
		t.Fatalf("%s: got %v, want an error wrapping walq.ErrLeaseLost", what, err)
	}
}

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// noBackoff retries at once.
func noBackoff(int) time.Duration { return 0 }

func describe(m walq.Message) string {
	return fmt.Sprintf("item %d (%q, attempt %d)", m.ID, m.Body, m.Attempt)
}

// Walq is q as a Queue: a walq Queue has every method but DeadLetters in
// the form Queue asks, and its DeadLetters cannot fail.
func Walq(q *walq.Queue) Queue { return walqQueue{q} }

type walqQueue struct{ *walq.Queue }

func (q walqQueue) DeadLetters(limit int) ([]walq.DeadLetter, error) {
	return q.Queue.DeadLetters(limit), nil
}

// Behaviours returns the names of Run's subtests, in the order it runs
// them.
func Behaviours() []string {
	names := make([]string, len(behaviours))
	for i, b := range behaviours {
		names[i] = b.name
	}
	return names
}
