//go:build long

package walq_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq"
	"github.com/walq/walq/walqtest"
)

// The broken engines: walq's Queue with one promise taken away each. The
// conformance suite must catch every one; TestSuiteCatchesBrokenEngines
// checks that it does, and which behaviours fail.

// ackIgnored reports every ack done and does nothing.
type ackIgnored struct{ walqtest.Queue }

func (ackIgnored) Ack(walq.Receipt) error { return nil }

// neverExtended reports every extension done and does nothing.
type neverExtended struct{ walqtest.Queue }

func (neverExtended) Extend(walq.Receipt, time.Duration) error { return nil }

// staleAccepted does not fence: a call with any receipt an item ever had
// acts on the item's current lease, as a broker that keys its pending
// deliveries by message would.
type staleAccepted struct {
	walqtest.Queue
	mu     sync.Mutex
	item   map[walq.Receipt]uint64 // every receipt handed out, to its item
	latest map[uint64]walq.Receipt // each item's newest receipt
}

func newStaleAccepted(q walqtest.Queue) *staleAccepted {
	return &staleAccepted{Queue: q, item: map[walq.Receipt]uint64{}, latest: map[uint64]walq.Receipt{}}
}

func (q *staleAccepted) note(m walq.Message) {
	q.mu.Lock()
	q.item[m.Receipt] = m.ID
	q.latest[m.ID] = m.Receipt
	q.mu.Unlock()
}

func (q *staleAccepted) current(r walq.Receipt) walq.Receipt {
	q.mu.Lock()
	defer q.mu.Unlock()
	if id, ok := q.item[r]; ok {
		return q.latest[id]
	}
	return r
}

func (q *staleAccepted) Get(ctx context.Context) (walq.Message, error) {
	m, err := q.Queue.Get(ctx)
	if err == nil {
		q.note(m)
	}
	return m, err
}

func (q *staleAccepted) TryGet() (walq.Message, bool, error) {
	m, ok, err := q.Queue.TryGet()
	if ok {
		q.note(m)
	}
	return m, ok, err
}

func (q *staleAccepted) Ack(r walq.Receipt) error { return q.Queue.Ack(q.current(r)) }
func (q *staleAccepted) Nack(r walq.Receipt, cause error) error {
	return q.Queue.Nack(q.current(r), cause)
}
func (q *staleAccepted) DeadLetter(r walq.Receipt, cause error) error {
	return q.Queue.DeadLetter(q.current(r), cause)
}
func (q *staleAccepted) Extend(r walq.Receipt, d time.Duration) error {
	return q.Queue.Extend(q.current(r), d)
}

// attemptsReset reports every delivery as the first attempt.
type attemptsReset struct{ walqtest.Queue }

func (q attemptsReset) Get(ctx context.Context) (walq.Message, error) {
	m, err := q.Queue.Get(ctx)
	m.Attempt = 1
	return m, err
}

func (q attemptsReset) TryGet() (walq.Message, bool, error) {
	m, ok, err := q.Queue.TryGet()
	m.Attempt = 1
	return m, ok, err
}

// causeDropped forgets why an item failed.
type causeDropped struct{ walqtest.Queue }

func (q causeDropped) Nack(r walq.Receipt, _ error) error       { return q.Queue.Nack(r, nil) }
func (q causeDropped) DeadLetter(r walq.Receipt, _ error) error { return q.Queue.DeadLetter(r, nil) }

// backoffSkipped brings a nacked item back at once: dead-lettered and
// redriven.
type backoffSkipped struct{ walqtest.Queue }

func (q backoffSkipped) Nack(r walq.Receipt, cause error) error {
	before, err := q.Queue.DeadLetters(0)
	if err != nil {
		return err
	}
	if err := q.Queue.DeadLetter(r, cause); err != nil {
		return err
	}
	after, err := q.Queue.DeadLetters(0)
	if err != nil {
		return err
	}
	for _, d := range after {
		if !slices.ContainsFunc(before, func(b walq.DeadLetter) bool { return b.ID == d.ID }) {
			return q.Queue.Redrive(d.ID)
		}
	}
	return nil
}

// redriveIgnored and purgeIgnored report success and do nothing.
type redriveIgnored struct{ walqtest.Queue }

func (redriveIgnored) Redrive(...uint64) error { return nil }

type purgeIgnored struct{ walqtest.Queue }

func (purgeIgnored) PurgeDeadLetters(...uint64) error { return nil }

// putRewritten changes what each put asks for before passing it on.
type putRewritten struct {
	walqtest.Queue
	rewrite func(*walq.Item)
}

func (q putRewritten) Put(ctx context.Context, body []byte, opts ...walq.PutOption) (uint64, error) {
	var it walq.Item
	for _, o := range opts {
		o(&it)
	}
	q.rewrite(&it)
	kept := []walq.PutOption{walq.WithDelay(it.Delay), walq.WithPriority(it.Priority)}
	if !it.Deadline.IsZero() {
		kept = append(kept, walq.WithDeadline(it.Deadline))
	}
	if it.Key != "" {
		kept = append(kept, walq.WithKey(it.Key))
	}
	return q.Queue.Put(ctx, body, kept...)
}

func rewriting(rewrite func(*walq.Item)) func(walqtest.Queue) walqtest.Queue {
	return func(q walqtest.Queue) walqtest.Queue { return putRewritten{q, rewrite} }
}

var brokenEngines = []struct {
	name string
	wrap func(walqtest.Queue) walqtest.Queue
	// mustFail are behaviours the suite must fail on this engine (it may
	// fail others too; the test logs them all).
	mustFail []string
	// target, when set, is the engine itself, in place of walq's queue
	// wrapped by wrap.
	target func() walqtest.Target
}{
	{"ack-ignored", func(q walqtest.Queue) walqtest.Queue { return ackIgnored{q} },
		[]string{"ReferenceScenario/Work", "AckEndsItem"}, nil},
	{"never-extended", func(q walqtest.Queue) walqtest.Queue { return neverExtended{q} },
		[]string{"ReferenceScenario/Work", "ExtendHoldsLease"}, nil},
	{"delay-cut-short", rewriting(func(it *walq.Item) { it.Delay /= 2 }),
		[]string{"DelayNeverEarly", "EarlierInsertWakesConsumer"}, nil},
	{"stale-accepted", func(q walqtest.Queue) walqtest.Queue { return newStaleAccepted(q) },
		[]string{"StaleReceiptAfterExpiry", "StaleReceiptAfterRedrive"}, nil},
	// More, so that every behaviour is seen to fail on some engine.
	{"attempts-reset", func(q walqtest.Queue) walqtest.Queue { return attemptsReset{q} },
		[]string{"AttemptsCountedAtLease", "AttemptsCountedAcrossReopen", "NackBackoff"}, nil},
	{"cause-dropped", func(q walqtest.Queue) walqtest.Queue { return causeDropped{q} },
		[]string{"DeadLetterCauseAndAttempts"}, nil},
	{"backoff-skipped", func(q walqtest.Queue) walqtest.Queue { return backoffSkipped{q} },
		[]string{"NackBackoff"}, nil},
	{"redrive-ignored", func(q walqtest.Queue) walqtest.Queue { return redriveIgnored{q} },
		[]string{"Redrive", "StaleReceiptAfterRedrive"}, nil},
	{"purge-ignored", func(q walqtest.Queue) walqtest.Queue { return purgeIgnored{q} },
		[]string{"Purge"}, nil},
	{"deadline-dropped", rewriting(func(it *walq.Item) { it.Deadline = time.Time{} }),
		[]string{"DeadlineAfterDelay"}, nil},
	{"priority-dropped", rewriting(func(it *walq.Item) { it.Priority = 0 }),
		[]string{"PriorityThenReadyOrder"}, nil},
	{"key-dropped", rewriting(func(it *walq.Item) { it.Key = "" }),
		[]string{"KeysAcrossReopen"}, nil},
	// settings-unrecorded claims to record a queue's settings but runs on
	// whatever each open passes: walq's default queue, whose settings are
	// the Options of the open.
	{"settings-unrecorded", nil, []string{"OpeningKeepsSettings"}, func() walqtest.Target {
		tg := walqTarget(walq.SyncNever)
		tg.Caps.RecordedSettings = true
		return tg
	}},
}

const brokenEnv = "WALQ_BROKEN_ENGINE"

// TestBrokenEngine runs the suite on one broken engine; it runs only in
// the process TestSuiteCatchesBrokenEngines starts, where it must fail.
func TestBrokenEngine(t *testing.T) {
	if os.Getenv(brokenEnv) == "" {
		t.Skip("runs only under TestSuiteCatchesBrokenEngines")
	}
	for _, b := range brokenEngines {
		t.Run(b.name, func(t *testing.T) {
			if b.target != nil {
				walqtest.Run(t, b.target())
				return
			}
			walqtest.Run(t, wrappedTarget(walq.SyncNever, b.wrap))
		})
	}
}

// TestSuiteCatchesBrokenEngines runs the suite on each broken engine, in a
// process of its own, and checks that the behaviours it breaks fail.
func TestSuiteCatchesBrokenEngines(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("this is the process that runs a broken engine")
	}
	if testing.Short() {
		t.Skip("-short: the suite on a dozen broken engines takes a minute")
	}
	failLine := regexp.MustCompile(`--- FAIL: TestBrokenEngine/([^/]+)/(\S+)`)
	var mu sync.Mutex
	caught := map[string]bool{} // behaviours that failed on some engine
	ran := 0                    // engines whose run was read (-run may select fewer)
	t.Cleanup(func() {
		if t.Failed() || ran < len(brokenEngines) {
			return
		}
		for _, name := range walqtest.Behaviours() {
			if !caught[name] {
				t.Errorf("behaviour %s failed on none of the broken engines: nothing shows it can fail", name)
			}
		}
	})
	for _, b := range brokenEngines {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"-test.run=^TestBrokenEngine$/^" + regexp.QuoteMeta(b.name) + "$", "-test.v", "-test.count=1"}
			if !slices.ContainsFunc(b.mustFail, func(s string) bool { return strings.HasPrefix(s, "ReferenceScenario") }) {
				// The real-time scenario takes most of a run; where it is
				// not what the engine breaks, leave it out.
				args = append(args, "-test.skip=^TestBrokenEngine$/^"+regexp.QuoteMeta(b.name)+"$/^ReferenceScenario$")
			}
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe, args...)
			cmd.Env = append(os.Environ(), brokenEnv+"=1")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err == nil {
				t.Fatalf("the suite passed on the %s engine:\n%s", b.name, out.String())
			}
			var failed []string
			sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
			for sc.Scan() {
				if m := failLine.FindStringSubmatch(strings.TrimSpace(sc.Text())); m != nil && m[1] == b.name {
					failed = append(failed, m[2])
				}
			}
			mu.Lock()
			ran++
			for _, f := range failed {
				caught[f] = true
			}
			mu.Unlock()
			for _, want := range b.mustFail {
				if !slices.Contains(failed, want) {
					t.Errorf("on the %s engine the suite did not fail %s; it failed %v", b.name, want, failed)
				}
			}
			t.Logf("%s: the suite failed %s", b.name, strings.Join(failed, ", "))
		})
	}
}
