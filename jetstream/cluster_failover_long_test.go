//go:build long

package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

// Failover tests: real nats-server processes on 127.0.0.1, killed with
// SIGKILL (or restarted) while workers hold leases and settle them. Each
// test keeps a ledger of every lease a worker was handed and checks, with
// counters and invariants only (never a timing assertion):
//
//   - nothing lost: every item put is, at the end, acked (an Ack returned
//     nil) or dead-lettered, exactly one of the two; an item whose only
//     Ack returned ErrLeaseLost with its outcome unknown (the error also
//     wraps ErrUnavailable: the record write may have been stored) counts
//     as acked only if the item is gone from the work stream;
//   - nothing run twice under valid leases (see foLease.validUntil and
//     foLease.heldUntil for what "valid" means);
//   - an acked item is gone: no lease of it is handed out after an Ack of
//     it returned nil, the work stream holds none of the queues' messages
//     at the end, and the consumers have nothing pending;
//   - attempts grow by lease and never pass MaxAttempts, across the crash;
//   - every error a call returned while a server was away wraps
//     ErrUnavailable (or is ErrLeaseLost); anything else is reported.
//
// What a valid lease is. The README's fence: a lease ends on the client at
// request time + Visibility − Fence (Message.LeaseEnd), and after each
// Extend at its send time + min(d, Visibility − Fence); a call is sent only
// while the lease holds on the client, and the item's record in the Dir's
// bucket holds the lease (compare-and-swap) until request time +
// Visibility, a Fence later, so no delivery can take the item before the
// client has given it up. A lease is valid from the moment Get handed it
// out until the earlier of its client-side end and the settling call that
// ended it (an Ack or Nack that returned nil). Two leases of one item both
// valid at the same instant, whose Acks both returned nil, are a double
// run: the violation the task names. Two stricter consequences of the
// same fence are checked too: (1) a lease is never handed out while an
// earlier lease of the item is still held on the client (not past its
// LeaseEnd, not ended by a Nack), whatever the Acks returned; (2) once an
// Ack returned nil, the record says done, and no later delivery of the
// item is handed out at all.

// foLease is one lease a worker was handed, as the test saw it.
type foLease struct {
	n       int // in the order the leases were handed out
	worker  string
	queue   string
	id      uint64
	attempt int
	deliv   int
	handed  time.Time // Get or TryGet returned it
	// endLo and endHi bound the lease's client-side end: Message.LeaseEnd,
	// then each Extend that returned nil (counted from the call's start and
	// from its return: the adapter counts from the moment it sent).
	endLo, endHi time.Time
	extends      int
	how          string    // "ack", "nack", "deadletter"; "" never settled
	start, done  time.Time // the settling call: its first try began, its last returned
	tries        int
	ok           bool // the settling call returned nil
	lost         bool // it returned ErrLeaseLost
	unknown      bool // ErrLeaseLost that also wraps ErrUnavailable: the outcome is not known
	err          string
}

// validUntil is the end of the lease's valid window for the double-run
// check: its client-side end (the latest one an Extend may have given),
// or the return of the settling call that ended it, whichever is first.
func (l *foLease) validUntil() time.Time {
	end := l.endHi
	if l.ok && l.done.Before(end) {
		end = l.done
	}
	return end
}

// heldUntil is how long no other lease of the item may be handed out: the
// lease's client-side end (the earliest an Extend may have given), or the
// start of a Nack or DeadLetter that may have ended it (returned nil, or
// its outcome is unknown). An Ack that returned nil ends the item, not only
// the lease (checked apart); an Ack whose outcome is unknown leaves the
// lease held to its end.
func (l *foLease) heldUntil() time.Time {
	end := l.endLo
	if (l.how == "nack" || l.how == "deadletter") && (l.ok || l.unknown) && l.start.Before(end) {
		end = l.start
	}
	return end
}

func (l *foLease) String() string {
	s := fmt.Sprintf("lease #%d of item %d (queue %q) attempt %d deliveries %d by %s: handed %s, lease end %s",
		l.n, l.id, l.queue, l.attempt, l.deliv, l.worker, foClock(l.handed), foClock(l.endLo))
	if l.extends > 0 {
		s += fmt.Sprintf(" (after %d extends)", l.extends)
	}
	switch {
	case l.how == "":
		s += "; never settled"
	case l.ok:
		s += fmt.Sprintf("; %s returned nil (%s..%s, %d tries)", l.how, foClock(l.start), foClock(l.done), l.tries)
	default:
		s += fmt.Sprintf("; %s failed (%s..%s, %d tries): %s", l.how, foClock(l.start), foClock(l.done), l.tries, l.err)
	}
	return s
}

var foEpoch = time.Now()

// foClock writes t as the seconds since the test binary started.
func foClock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%.3fs", t.Sub(foEpoch).Seconds())
}

// foItem is an item the test put.
type foItem struct {
	queue  string
	index  int
	poison bool // the workers never ack it: it must end dead-lettered
	// permanent: the handler dead-letters it at once (walq.Permanent): its
	// dead letter may have fewer attempts than MaxAttempts.
	permanent bool
}

// foLedger is what the workers did.
type foLedger struct {
	mu      sync.Mutex
	leases  []*foLease
	byID    map[uint64][]*foLease
	items   map[uint64]foItem
	byIndex map[string]uint64 // queue/index -> ID
	errs    []string          // calls that failed with an error not wrapping ErrUnavailable
	unavail atomic.Int64      // calls that failed with ErrUnavailable and were tried again
	settled atomic.Int64      // settling calls that returned
	// in flight, for the kill: settling calls running now.
	acksIn, nacksIn atomic.Int64
	live            map[string]*foLease // by receipt, for the Work wrapper
}

func newFoLedger() *foLedger {
	return &foLedger{byID: map[uint64][]*foLease{}, items: map[uint64]foItem{}, byIndex: map[string]uint64{}, live: map[string]*foLease{}}
}

func (g *foLedger) put(id uint64, it foItem) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.items[id] = it
	g.byIndex[it.queue+"/"+strconv.Itoa(it.index)] = id
}

func (g *foLedger) item(id uint64) (foItem, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	it, ok := g.items[id]
	return it, ok
}

func (g *foLedger) hand(worker, queue string, m walq.Message) *foLease {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	l := &foLease{n: len(g.leases) + 1, worker: worker, queue: queue, id: m.ID, attempt: m.Attempt, deliv: m.Deliveries,
		handed: now, endLo: m.LeaseEnd, endHi: m.LeaseEnd}
	g.leases = append(g.leases, l)
	g.byID[m.ID] = append(g.byID[m.ID], l)
	g.live[m.Receipt.String()] = l
	return l
}

func (g *foLedger) lease(r walq.Receipt) *foLease {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.live[r.String()]
}

func (g *foLedger) other(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.errs) < 200 {
		g.errs = append(g.errs, foClock(time.Now())+" "+fmt.Sprintf(format, args...))
	}
}

// settle ends l's record with the outcome of its settling call.
func (g *foLedger) settle(l *foLease, how string, start time.Time, tries int, err error) {
	done := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	l.how, l.start, l.done, l.tries = how, start, done, tries
	l.ok = err == nil
	l.lost = errors.Is(err, walq.ErrLeaseLost)
	l.unknown = l.lost && errors.Is(err, walqjs.ErrUnavailable)
	if err != nil {
		l.err = err.Error()
	}
	g.settled.Add(1)
}

// foSettle acks or nacks l's lease (how: "ack", "nack"), trying again
// while the call fails with ErrUnavailable (the lease still holds: the
// adapter returns ErrLeaseLost once it has ended). Any other error is
// recorded as a failure of the contract and tried again too, until the
// lease ends.
func foSettle(q *walqjs.Queue, g *foLedger, l *foLease, r walq.Receipt, how string) error {
	in := &g.acksIn
	if how == "nack" {
		in = &g.nacksIn
	}
	in.Add(1)
	defer in.Add(-1)
	start := time.Now()
	tries := 0
	for {
		tries++
		var err error
		if how == "ack" {
			err = q.Ack(r)
		} else {
			err = q.Nack(r, fmt.Errorf("attempt %d refused by the test", l.attempt))
		}
		switch {
		case err == nil, errors.Is(err, walq.ErrLeaseLost), errors.Is(err, walq.ErrClosed):
			g.settle(l, how, start, tries, err)
			return err
		case errors.Is(err, walqjs.ErrUnavailable):
			g.unavail.Add(1)
		default:
			g.other("%s of item %d attempt %d: an error that wraps neither ErrUnavailable nor ErrLeaseLost: %v", how, l.id, l.attempt, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// foGet is Get, tried again while it fails (Get waits for a server that
// cannot be reached; an error it returns is recorded unless it wraps
// ErrUnavailable). ok is false once ctx ended.
func foGet(ctx context.Context, q *walqjs.Queue, g *foLedger, worker string) (walq.Message, *foLease, bool) {
	for {
		m, err := q.Get(ctx)
		if err == nil {
			return m, g.hand(worker, q.Name(), m), true
		}
		if ctx.Err() != nil {
			return walq.Message{}, nil, false
		}
		if errors.Is(err, walqjs.ErrUnavailable) {
			g.unavail.Add(1)
		} else {
			g.other("get by %s: an error that does not wrap ErrUnavailable: %v", worker, err)
		}
		select {
		case <-ctx.Done():
			return walq.Message{}, nil, false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// foPut puts the item of index i on q with its key, trying again with the
// same key until a put returns (ErrDuplicate: the first try was stored),
// and records it.
func foPut(ctx context.Context, q *walqjs.Queue, g *foLedger, it foItem) error {
	key := fmt.Sprintf("%s-%d", it.queue, it.index)
	for {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		id, err := q.Put(pctx, []byte(key), walq.WithKey(key))
		cancel()
		if err == nil || errors.Is(err, walq.ErrDuplicate) {
			if id == 0 {
				return fmt.Errorf("put %s: ID 0 (%v)", key, err)
			}
			g.put(id, it)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("put %s: %v (the test's deadline: %w)", key, err, ctx.Err())
		}
		if errors.Is(err, walqjs.ErrUnavailable) {
			g.unavail.Add(1)
		} else {
			g.other("put %s: an error that does not wrap ErrUnavailable: %v", key, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// foState is what the Dir holds, read at the end of a run.
type foState struct {
	dead    map[uint64]walq.DeadLetter
	gone    map[uint64]bool // the item's message is no longer in the work stream
	inQueue uint64          // messages on the queues' ready subjects
	pending []string        // consumers with messages pending or awaiting an ack
}

// foReadState reads the dead letters of qs, whether each of ids is still
// in the work stream, and the counts of the queues' subjects and
// consumers.
func foReadState(ctx context.Context, js njs.JetStream, dir string, qs []*walqjs.Queue, ids []uint64) (*foState, error) {
	st := &foState{dead: map[uint64]walq.DeadLetter{}, gone: map[uint64]bool{}}
	for _, q := range qs {
		dl, err := q.DeadLetters(0)
		if err != nil {
			return nil, fmt.Errorf("dead letters of %q: %w", q.Name(), err)
		}
		for _, d := range dl {
			st.dead[d.ID] = d
		}
	}
	work, err := js.Stream(ctx, "WALQ_"+dir)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		_, err := work.GetMsg(ctx, id)
		switch {
		case errors.Is(err, njs.ErrMsgNotFound):
			st.gone[id] = true
		case err != nil:
			return nil, fmt.Errorf("get message %d: %w", id, err)
		}
	}
	subj := "walq." + dir + ".q.>"
	info, err := work.Info(ctx, njs.WithSubjectFilter(subj))
	if err != nil {
		return nil, err
	}
	for _, n := range info.State.Subjects {
		st.inQueue += n
	}
	for _, q := range qs {
		c, err := js.Consumer(ctx, "WALQ_"+dir, walqjs.ConsumerName(q.Name(), 0))
		if err != nil {
			return nil, err
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return nil, err
		}
		if ci.NumPending != 0 || ci.NumAckPending != 0 {
			st.pending = append(st.pending, fmt.Sprintf("%s: %d pending, %d awaiting an ack", ci.Name, ci.NumPending, ci.NumAckPending))
		}
	}
	return st, nil
}

// unresolved lists the items put that are neither acked, nor
// dead-lettered, nor gone after an Ack of unknown outcome.
func (g *foLedger) unresolved(st *foState) []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []uint64
	for id := range g.items {
		if st.dead[id].ID == id {
			continue
		}
		acked, unknown := false, false
		for _, l := range g.byID[id] {
			if l.how == "ack" && l.ok {
				acked = true
			}
			if l.how == "ack" && l.unknown {
				unknown = true
			}
		}
		if acked || (unknown && st.gone[id]) {
			continue
		}
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// unknownIDs lists the items with an Ack whose outcome is not known: the
// ones whose presence in the work stream tells.
func (g *foLedger) unknownIDs() []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []uint64
	for id, ls := range g.byID {
		for _, l := range ls {
			if l.how == "ack" && l.unknown {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

func (g *foLedger) ids() []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]uint64, 0, len(g.items))
	for id := range g.items {
		out = append(out, id)
	}
	return out
}

// foAwaitDone waits, while the workers run, until every item put is
// resolved and the queues' subjects and consumers are empty (an acked
// message leaves asynchronously: its next delivery finishes one whose Ack
// was lost). The test fails at ctx's end, saying what is left.
func foAwaitDone(ctx context.Context, t *testing.T, js njs.JetStream, dir string, qs []*walqjs.Queue, g *foLedger, logs *foLogs, want func() bool) *foState {
	t.Helper()
	var last *foState
	var lastErr error
	for {
		if want == nil || want() {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			st, err := foReadState(rctx, js, dir, qs, g.unknownIDs())
			cancel()
			if err == nil {
				last = st
				if len(g.unresolved(st)) == 0 && st.inQueue == 0 && len(st.pending) == 0 {
					return st
				}
			} else {
				lastErr = err
			}
		}
		select {
		case <-ctx.Done():
			var b strings.Builder
			fmt.Fprintf(&b, "the test's deadline passed before every item was resolved")
			if last == nil {
				fmt.Fprintf(&b, "; the state could not be read: %v", lastErr)
			} else {
				left := g.unresolved(last)
				fmt.Fprintf(&b, ": %d items unresolved, %d messages on the queues' subjects, consumers %v", len(left), last.inQueue, last.pending)
				for i, id := range left {
					if i == 20 {
						fmt.Fprintf(&b, "\n  ...")
						break
					}
					fmt.Fprintf(&b, "\n  item %d (gone from the stream: %v):", id, last.gone[id])
					for _, l := range g.leasesOf(id) {
						fmt.Fprintf(&b, "\n    %s", l)
					}
				}
			}
			logs.dump(t, nil)
			t.Fatal(b.String())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (g *foLedger) leasesOf(id uint64) []*foLease {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*foLease(nil), g.byID[id]...)
}

// check holds the ledger to the invariants (see the top of the file)
// against the final state, and returns the violations, each with the
// leases that show it.
func (g *foLedger) check(st *foState, maxAttempts int) (violations []string, summary string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	add := func(id uint64, what string, ls ...*foLease) {
		s := fmt.Sprintf("item %d: %s", id, what)
		for _, l := range ls {
			s += "\n    " + l.String()
		}
		violations = append(violations, s)
	}
	acked, dead, unknownAcked, lost := 0, 0, 0, 0
	for id, it := range g.items {
		ls := g.byID[id]
		oks := 0
		unknown := false
		for _, l := range ls {
			if l.how == "ack" && l.ok {
				oks++
			}
			if l.how == "ack" && l.unknown {
				unknown = true
			}
		}
		d, isDead := st.dead[id]
		isDead = isDead && d.ID == id
		switch {
		case oks > 1:
			add(id, fmt.Sprintf("acked %d times (Ack returned nil on %d leases)", oks, oks), ls...)
		case oks == 1 && isDead:
			add(id, fmt.Sprintf("acked and dead-lettered (dead letter: %d attempts, %q)", d.Attempts, d.LastError), ls...)
		case oks == 1:
			acked++
		case isDead:
			dead++
		case unknown && st.gone[id]:
			unknownAcked++
		default:
			lost++
			add(id, fmt.Sprintf("lost: never acked, not dead-lettered (in the work stream: %v)", !st.gone[id]), ls...)
		}
		if it.poison && oks > 0 {
			add(id, "an item the workers never ack was acked", ls...)
		}
		if isDead {
			if d.Attempts < 1 || d.Attempts > maxAttempts {
				add(id, fmt.Sprintf("dead-lettered with %d attempts, MaxAttempts %d", d.Attempts, maxAttempts), ls...)
			}
			if !it.permanent && d.Attempts != maxAttempts {
				add(id, fmt.Sprintf("dead-lettered by its attempts with %d attempts, not MaxAttempts %d (cause %q)", d.Attempts, maxAttempts, d.LastError), ls...)
			}
			for _, l := range ls {
				if l.attempt > d.Attempts {
					add(id, fmt.Sprintf("a lease of attempt %d, past the dead letter's %d attempts", l.attempt, d.Attempts), l)
				}
			}
		}
	}
	for id, ls := range g.byID {
		if _, ok := g.items[id]; !ok {
			add(id, "handed out, never put by the test (a second copy of an item?)", ls...)
			continue
		}
		for j, b := range ls {
			if b.attempt < 1 || b.attempt > maxAttempts {
				add(id, fmt.Sprintf("handed out as attempt %d, MaxAttempts %d", b.attempt, maxAttempts), b)
			}
			for _, a := range ls[:j] {
				// a was handed out before b.
				if b.attempt <= a.attempt {
					add(id, fmt.Sprintf("attempt %d handed out after attempt %d: the attempts did not grow", b.attempt, a.attempt), a, b)
				}
				if a.how == "ack" && a.ok && b.how == "ack" && b.ok && b.handed.Before(a.validUntil()) && a.handed.Before(b.validUntil()) {
					add(id, "run by two workers with valid leases at the same time, both Acks returned nil", a, b)
				}
				if a.how == "ack" && a.ok {
					add(id, "handed out again after an Ack of it returned nil (or while that Ack ran)", a, b)
				} else if b.handed.Before(a.heldUntil()) {
					add(id, "handed out while an earlier lease of it was held (before its LeaseEnd, not ended by a Nack)", a, b)
				}
			}
		}
	}
	for _, e := range g.errs {
		violations = append(violations, "a call failed with an error that is neither ErrUnavailable nor ErrLeaseLost: "+e)
	}
	if st.inQueue != 0 {
		violations = append(violations, fmt.Sprintf("%d messages left on the queues' ready subjects", st.inQueue))
	}
	for _, p := range st.pending {
		violations = append(violations, "a consumer is not empty: "+p)
	}
	hows := map[string]int{}
	for _, l := range g.leases {
		k := l.how
		switch {
		case k == "":
			k = "unsettled"
		case l.ok:
			k += " ok"
		case l.unknown:
			k += " lease lost, outcome unknown"
		case l.lost:
			k += " lease lost"
		default:
			k += " failed"
		}
		hows[k]++
	}
	summary = fmt.Sprintf("%d items put: %d acked, %d dead-lettered, %d acked by an Ack of unknown outcome (gone), %d lost; %d leases handed out %v; %d calls retried after ErrUnavailable, %d other errors",
		len(g.items), acked, dead, unknownAcked, lost, len(g.leases), hows, g.unavail.Load(), len(g.errs))
	return violations, summary
}

// foReport logs the summary and fails the test with every violation.
func foReport(t *testing.T, g *foLedger, st *foState, maxAttempts int, logs *foLogs) {
	t.Helper()
	v, summary := g.check(st, maxAttempts)
	t.Log(summary)
	if len(v) == 0 {
		return
	}
	var ids []uint64
	for _, s := range v {
		if rest, ok := strings.CutPrefix(s, "item "); ok {
			if n, err := strconv.ParseUint(rest[:strings.IndexByte(rest, ':')], 10, 64); err == nil {
				ids = append(ids, n)
			}
		}
	}
	logs.dump(t, ids)
	for i, s := range v {
		if i == 40 {
			t.Errorf("... and %d more violations", len(v)-i)
			break
		}
		t.Error(s)
	}
}

// foLogs keeps the adapter's log lines (a Dir's Logger), for the report.
type foLogs struct {
	mu    sync.Mutex
	lines []string
	count map[string]int
}

type foLogHandler struct {
	logs  *foLogs
	attrs []slog.Attr
}

func (h foLogHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h foLogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", foClock(r.Time), r.Level, r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.logs.mu.Lock()
	defer h.logs.mu.Unlock()
	if h.logs.count == nil {
		h.logs.count = map[string]int{}
	}
	h.logs.count[r.Level.String()+" "+r.Message]++
	if len(h.logs.lines) < 20000 {
		h.logs.lines = append(h.logs.lines, b.String())
	}
	return nil
}
func (h foLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return foLogHandler{logs: h.logs, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h foLogHandler) WithGroup(string) slog.Handler { return h }

func (l *foLogs) logger() *slog.Logger { return slog.New(foLogHandler{logs: l}) }

// dump logs the counts of the adapter's messages and the lines that name
// one of ids (all of ids nil: the last 60 lines).
func (l *foLogs) dump(t *testing.T, ids []uint64) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []string
	for k := range l.count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("adapter log: %d x %s", l.count[k], k)
	}
	var pick []string
	if ids == nil {
		pick = l.lines[max(0, len(l.lines)-60):]
	} else {
		for _, line := range l.lines {
			for _, id := range ids {
				s := strconv.FormatUint(id, 10)
				if strings.Contains(line, "id="+s+" ") || strings.HasSuffix(line, "id="+s) || strings.Contains(line, "seq="+s+" ") || strings.HasSuffix(line, "seq="+s) {
					pick = append(pick, line)
					break
				}
			}
		}
		if len(pick) > 200 {
			pick = pick[len(pick)-200:]
		}
	}
	for _, line := range pick {
		t.Log("adapter log: " + line)
	}
}

// Servers.

// foKill kills n's process with SIGKILL and waits for it.
func foKill(t *testing.T, n *node) {
	t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %s: %v", n.name, err)
	}
	n.cmd.Wait()
}

// foStop stops n's process with SIGTERM (nats-server shuts down cleanly)
// and waits for it.
func foStop(t *testing.T, n *node) {
	t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", n.name, err)
	}
	done := make(chan struct{})
	go func() { n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Logf("%s did not stop within 15s of SIGTERM: SIGKILL", n.name)
		n.cmd.Process.Kill()
		<-done
	}
}

// foRestart starts n again with the same command line (its configuration:
// the same store directory and ports; its log file is appended to). The
// cleanup of startCluster, which kills n.cmd, kills the new process.
func foRestart(t *testing.T, n *node) {
	t.Helper()
	cmd := exec.Command(n.cmd.Path, n.cmd.Args[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("restart %s: %v", n.name, err)
	}
	n.cmd = cmd
}

// foStartSingle starts one nats-server process, not clustered, with its
// file store in store and sync_interval: always, on port.
func foStartSingle(t *testing.T, store string, port int) *node {
	t.Helper()
	bin, err := buildServer()
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	conf := fmt.Sprintf(`server_name: r1
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q
  sync_interval: always
}
`, port, store)
	path := filepath.Join(base, "r1.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	n := &node{name: "r1", port: port, log: filepath.Join(base, "r1.log")}
	n.cmd = exec.Command(bin, "-c", path, "-l", n.log)
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n.cmd.ProcessState == nil {
			n.cmd.Process.Kill()
			n.cmd.Wait()
		}
	})
	return n
}

// foURLs is the cluster's URLs with nodes[first] first: a connection made
// with them (foConnect does not shuffle them) is on that node while it
// runs, so the tests spread their connections over the nodes.
func foURLs(nodes []*node, first int) string {
	var urls []string
	for i := range nodes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", nodes[(first+i)%len(nodes)].port))
	}
	return strings.Join(urls, ",")
}

// foConnect connects to url (the servers in the order given), reconnecting
// for good.
func foConnect(t *testing.T, url string) (*nats.Conn, njs.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.DontRandomize(), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// foOpenQueue opens queue name of the Dir dir on a connection of its own
// (as another process would), retrying while the cluster is not ready.
func foOpenQueue(ctx context.Context, t *testing.T, url, dir, name string, logs *foLogs, qo walqjs.QueueOptions) *walqjs.Queue {
	t.Helper()
	_, js := foConnect(t, url)
	for {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d, err := walqjs.OpenDir(octx, js, dir, walqjs.Options{Logger: logs.logger()})
		var q *walqjs.Queue
		if err == nil {
			q, err = d.OpenQueue(octx, name, qo)
		}
		cancel()
		if err == nil {
			t.Cleanup(func() { q.Close() })
			return q
		}
		if ctx.Err() != nil {
			t.Fatalf("open queue %q of %s: %v", name, dir, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// foLeaders names the leaders of the Dir's streams and of the consumers
// of queues ("" while there is none).
type foLeaders struct {
	work, hist, dlq string
	consumers       map[string]string
}

func (l foLeaders) String() string {
	var cs []string
	for q, n := range l.consumers {
		cs = append(cs, fmt.Sprintf("consumer of %q: %s", q, n))
	}
	sort.Strings(cs)
	return fmt.Sprintf("work stream: %s, history bucket: %s, dead letters: %s, %s", l.work, l.hist, l.dlq, strings.Join(cs, ", "))
}

func foReadLeaders(ctx context.Context, js njs.JetStream, dir string, queues ...string) foLeaders {
	ls := foLeaders{consumers: map[string]string{}}
	stream := func(name string) string {
		st, err := js.Stream(ctx, name)
		if err != nil || st.CachedInfo().Cluster == nil {
			return ""
		}
		return st.CachedInfo().Cluster.Leader
	}
	ls.work = stream("WALQ_" + dir)
	ls.hist = stream("KV_WALQ_" + dir + "_HIST")
	ls.dlq = stream("WALQ_" + dir + "_DLQ")
	for _, q := range queues {
		c, err := js.Consumer(ctx, "WALQ_"+dir, walqjs.ConsumerName(q, 0))
		if err == nil && c.CachedInfo().Cluster != nil {
			ls.consumers[q] = c.CachedInfo().Cluster.Leader
		}
	}
	return ls
}

// foLeaderOf waits for a leader to be named by read, until ctx ends.
func foLeaderOf(ctx context.Context, t *testing.T, what string, read func(context.Context) string) string {
	t.Helper()
	for {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		l := read(rctx)
		cancel()
		if l != "" {
			return l
		}
		if ctx.Err() != nil {
			t.Fatalf("no leader of %s before the test's deadline", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func foNode(t *testing.T, nodes []*node, name string) *node {
	t.Helper()
	for _, n := range nodes {
		if n.name == name {
			return n
		}
	}
	t.Fatalf("no node %q", name)
	return nil
}

// foStopWorkers ends the workers' context and waits for them, failing the
// test if they do not stop.
func foStopWorkers(t *testing.T, stop context.CancelFunc, wg *sync.WaitGroup) {
	t.Helper()
	stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the workers did not stop within 30s of their context's end: a call hangs")
	}
}

// The tests.

// TestClusterStreamLeaderKilledDuringAcksAndNacks: an R3 Dir on three
// nats-server processes, 300 items, six workers on two connections that
// get and ack (a fifth of the items are nacked on their first attempt, a
// tenth on every attempt, which dead-letters them at MaxAttempts). Once a
// third of the leases are settled, while an Ack and a Nack are in flight,
// the work stream's leader (stream info's Cluster.Leader) is killed with
// SIGKILL, and started again 1.5 s later on its store. Every item ends
// acked or dead-lettered, none twice, none run by two valid leases at
// once, and the acked items are gone.
func TestClusterStreamLeaderKilledDuringAcksAndNacks(t *testing.T) {
	const (
		items       = 300
		maxAttempts = 3
		dirName     = "fostream"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nodes := startCluster(t)
	_, js := foConnect(t, foURLs(nodes, 2))
	logs := &foLogs{}
	openClusterDir(t, js, dirName, walqjs.Options{Replicas: 3, Logger: logs.logger()})
	qo := walqjs.QueueOptions{Visibility: 3 * time.Second, MaxAttempts: maxAttempts, Backoff: zeroBackoff}
	// Two handles on connections of their own, on n1 and n2; the test's
	// own on n3.
	qs := []*walqjs.Queue{foOpenQueue(ctx, t, foURLs(nodes, 0), dirName, "jobs", logs, qo), foOpenQueue(ctx, t, foURLs(nodes, 1), dirName, "jobs", logs, qo)}
	g := newFoLedger()
	for i := range items {
		if err := foPut(ctx, qs[i%2], g, foItem{queue: "jobs", index: i, poison: i%10 == 0}); err != nil {
			t.Fatal(err)
		}
	}
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var wg sync.WaitGroup
	for w := range 6 {
		q := qs[w%2]
		name := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for {
				m, l, ok := foGet(wctx, q, g, name)
				if !ok {
					return
				}
				it, _ := g.item(m.ID)
				time.Sleep(2 * time.Millisecond)
				how := "ack"
				if it.poison || (it.index%5 == 1 && m.Attempt == 1) {
					how = "nack"
				}
				foSettle(q, g, l, m.Receipt, how)
			}
		})
	}
	// The kill: a third of the leases settled, an Ack and a Nack in flight.
	for g.settled.Load() < items/3 || g.acksIn.Load() == 0 || g.nacksIn.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatalf("%d leases settled before the test's deadline, no kill", g.settled.Load())
		}
		time.Sleep(time.Millisecond)
	}
	leaders := foReadLeaders(ctx, js, dirName, "jobs")
	leader := foLeaderOf(ctx, t, "the work stream", func(ctx context.Context) string { return foReadLeaders(ctx, js, dirName).work })
	victim := foNode(t, nodes, leader)
	acksIn, nacksIn := g.acksIn.Load(), g.nacksIn.Load()
	foKill(t, victim)
	killedAt := time.Now()
	t.Logf("SIGKILL of %s, the work stream's leader (%s), at %s: %d leases settled, %d Acks and %d Nacks in flight",
		leader, leaders, foClock(killedAt), g.settled.Load(), acksIn, nacksIn)
	time.Sleep(1500 * time.Millisecond)
	foRestart(t, victim)
	t.Logf("%s started again at %s", leader, foClock(time.Now()))
	foAwaitDone(ctx, t, js, dirName, qs, g, logs, nil)
	t.Logf("every item resolved %v after the kill; leaders now: %s", time.Since(killedAt).Round(time.Millisecond), foReadLeaders(ctx, js, dirName, "jobs"))
	foStopWorkers(t, stopWork, &wg)
	// Nothing is handed out once the workers stopped and the queue is
	// empty; the state is read again after they stopped.
	st, err := foReadState(ctx, js, dirName, qs, g.ids())
	if err != nil {
		t.Fatal(err)
	}
	foReport(t, g, st, maxAttempts, logs)
}

// TestClusterConsumerLeaderKilledMidLease: an R3 Dir, 80 items; four
// holders on one connection take 24 leases (Visibility 12 s) and hold
// them; the queue's consumer's leader (consumer info's Cluster.Leader;
// the consumer is walqjs.ConsumerName("jobs", 0), walq_jobs~p0) is killed
// with SIGKILL while three other workers on another connection get, nack
// (a sixth of the items, once) and ack the rest, and started again a
// second later. The holders then Ack their leases: each Ack returns nil or
// ErrLeaseLost, and no held item is handed to anyone while its lease holds.
func TestClusterConsumerLeaderKilledMidLease(t *testing.T) {
	const (
		items       = 80
		held        = 24
		maxAttempts = 5
		dirName     = "foconsumer"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nodes := startCluster(t)
	_, js := foConnect(t, foURLs(nodes, 2))
	logs := &foLogs{}
	openClusterDir(t, js, dirName, walqjs.Options{Replicas: 3, Logger: logs.logger()})
	qo := walqjs.QueueOptions{Visibility: 12 * time.Second, MaxAttempts: maxAttempts, Backoff: zeroBackoff}
	holderQ := foOpenQueue(ctx, t, foURLs(nodes, 0), dirName, "jobs", logs, qo)
	runnerQ := foOpenQueue(ctx, t, foURLs(nodes, 1), dirName, "jobs", logs, qo)
	qs := []*walqjs.Queue{holderQ, runnerQ}
	g := newFoLedger()
	for i := range items {
		if err := foPut(ctx, holderQ, g, foItem{queue: "jobs", index: i}); err != nil {
			t.Fatal(err)
		}
	}
	// The holders: 24 leases, held.
	type holding struct {
		m walq.Message
		l *foLease
	}
	var hmu sync.Mutex
	var holdings []holding
	var hwg sync.WaitGroup
	for w := range 4 {
		name := fmt.Sprintf("holder%d", w)
		hwg.Go(func() {
			for range held / 4 {
				m, l, ok := foGet(ctx, holderQ, g, name)
				if !ok {
					return
				}
				hmu.Lock()
				holdings = append(holdings, holding{m, l})
				hmu.Unlock()
			}
		})
	}
	hwg.Wait()
	if len(holdings) != held {
		t.Fatalf("%d leases held of %d", len(holdings), held)
	}
	// The runners, on another connection: the other items, during the
	// kill.
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var wg sync.WaitGroup
	for w := range 3 {
		name := fmt.Sprintf("runner%d", w)
		wg.Go(func() {
			for {
				m, l, ok := foGet(wctx, runnerQ, g, name)
				if !ok {
					return
				}
				it, _ := g.item(m.ID)
				time.Sleep(5 * time.Millisecond)
				how := "ack"
				if it.index%6 == 0 && m.Attempt == 1 {
					how = "nack"
				}
				foSettle(runnerQ, g, l, m.Receipt, how)
			}
		})
	}
	for g.settled.Load() < 10 {
		if ctx.Err() != nil {
			t.Fatal("the runners settled nothing before the test's deadline")
		}
		time.Sleep(time.Millisecond)
	}
	leaders := foReadLeaders(ctx, js, dirName, "jobs")
	leader := foLeaderOf(ctx, t, "the consumer", func(ctx context.Context) string { return foReadLeaders(ctx, js, dirName, "jobs").consumers["jobs"] })
	victim := foNode(t, nodes, leader)
	foKill(t, victim)
	killedAt := time.Now()
	t.Logf("SIGKILL of %s, the leader of consumer %s (%s), at %s, with %d leases held and %d settled by the runners",
		leader, walqjs.ConsumerName("jobs", 0), leaders, foClock(killedAt), held, g.settled.Load())
	time.Sleep(time.Second)
	foRestart(t, victim)
	newLeader := foLeaderOf(ctx, t, "the consumer", func(ctx context.Context) string { return foReadLeaders(ctx, js, dirName, "jobs").consumers["jobs"] })
	t.Logf("%s started again at %s; the consumer's leader is %s", leader, foClock(time.Now()), newLeader)
	// The holders Ack, each its own leases, after the restart.
	var okAcks, lostAcks, unknownAcks atomic.Int64
	for w := range 4 {
		hwg.Go(func() {
			for i, h := range holdings {
				if i%4 != w {
					continue
				}
				err := foSettle(holderQ, g, h.l, h.m.Receipt, "ack")
				switch {
				case err == nil:
					okAcks.Add(1)
				case errors.Is(err, walqjs.ErrUnavailable):
					unknownAcks.Add(1)
				case errors.Is(err, walq.ErrLeaseLost):
					lostAcks.Add(1)
				default:
					g.other("a holder's Ack of item %d after the restart: %v", h.m.ID, err)
				}
			}
		})
	}
	hwg.Wait()
	t.Logf("the holders' Acks after the restart: %d returned nil, %d ErrLeaseLost, %d ErrLeaseLost with the outcome unknown", okAcks.Load(), lostAcks.Load(), unknownAcks.Load())
	foAwaitDone(ctx, t, js, dirName, qs, g, logs, nil)
	t.Logf("every item resolved %v after the kill; leaders now: %s", time.Since(killedAt).Round(time.Millisecond), foReadLeaders(ctx, js, dirName, "jobs"))
	foStopWorkers(t, stopWork, &wg)
	st, err := foReadState(ctx, js, dirName, qs, g.ids())
	if err != nil {
		t.Fatal(err)
	}
	foReport(t, g, st, maxAttempts, logs)
}

// foSource is a Queue as WorkQueues sees it, recording every lease in the
// ledger: what TryGet and Get hand out, each Extend, the settling call.
type foSource struct {
	*walqjs.Queue
	g     *foLedger
	name  string
	fence time.Duration
}

func (s *foSource) record(m walq.Message) { s.g.hand(s.name, s.Queue.Name(), m) }

func (s *foSource) TryGet() (walq.Message, bool, error) {
	m, ok, err := s.Queue.TryGet()
	if err == nil && ok {
		s.record(m)
	}
	if err != nil && !errors.Is(err, walq.ErrClosed) {
		s.note("try-get", 0, err)
	}
	return m, ok, err
}

func (s *foSource) Get(ctx context.Context) (walq.Message, error) {
	m, err := s.Queue.Get(ctx)
	if err == nil {
		s.record(m)
	} else if ctx.Err() == nil && !errors.Is(err, walq.ErrClosed) {
		s.note("get", 0, err)
	}
	return m, err
}

// note records an error of a call: ErrUnavailable is counted, others are
// failures of the contract.
func (s *foSource) note(call string, id uint64, err error) {
	switch {
	case errors.Is(err, walq.ErrLeaseLost):
	case errors.Is(err, walqjs.ErrUnavailable):
		s.g.unavail.Add(1)
		s.g.other("%s of item %d on queue %q returned ErrUnavailable under WorkQueues, which ends the pool (Work fails on a settling call's error): %v", call, id, s.Queue.Name(), err)
	default:
		s.g.other("%s of item %d on queue %q: an error that wraps neither ErrUnavailable nor ErrLeaseLost: %v", call, id, s.Queue.Name(), err)
	}
}

func (s *foSource) Extend(r walq.Receipt, d time.Duration) error {
	start := time.Now()
	err := s.Queue.Extend(r, d)
	done := time.Now()
	l := s.g.lease(r)
	if l == nil {
		return err
	}
	if err != nil {
		s.note("extend", l.id, err)
		return err
	}
	by := min(d, s.Queue.Visibility()-s.fence)
	s.g.mu.Lock()
	l.endLo, l.endHi = start.Add(by), done.Add(by)
	l.extends++
	s.g.mu.Unlock()
	return nil
}

func (s *foSource) settle(r walq.Receipt, how string, call func() error) error {
	l := s.g.lease(r)
	start := time.Now()
	err := call()
	if l != nil {
		s.g.settle(l, how, start, 1, err)
		if err != nil {
			s.note(how, l.id, err)
		}
	}
	return err
}

func (s *foSource) Ack(r walq.Receipt) error {
	return s.settle(r, "ack", func() error { return s.Queue.Ack(r) })
}

func (s *foSource) Nack(r walq.Receipt, cause error) error {
	return s.settle(r, "nack", func() error { return s.Queue.Nack(r, cause) })
}

func (s *foSource) DeadLetter(r walq.Receipt, cause error) error {
	return s.settle(r, "deadletter", func() error { return s.Queue.DeadLetter(r, cause) })
}

// TestClusterServerRestartedUnderWorkQueues: an R3 Dir with three queues
// served by one walq.WorkQueues pool (a reserved worker for "a", four
// shared workers, "b" weighted twice), 150 items put before and 150 while
// it runs (keyed, each put tried again with its key until one returns).
// Handlers take 2 to 20 ms, every ninth 1.2 s (beyond a heartbeat, at a
// Visibility of 2 s), every eleventh fails its first attempt (a Nack), every
// seventeenth is permanent (DeadLetter). Once 100 leases are settled, the
// server the pool's connection is on (the work stream's leader when the
// pool connected) is stopped (SIGTERM) and started again on its store. WorkQueues must go on across it (the README: settling
// calls retry until the lease's end, then ErrLeaseLost; Work goes on when
// the server is back); it must return nil only when its context ends. The
// queues are wrapped to record each lease, Extend and settling call.
func TestClusterServerRestartedUnderWorkQueues(t *testing.T) {
	const (
		before, during = 150, 150
		maxAttempts    = 4
		dirName        = "foworkqueues"
		fence          = 200 * time.Millisecond
	)
	names := []string{"a", "b", "c"}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nodes := startCluster(t)
	_, js := foConnect(t, clusterURL(nodes))
	logs := &foLogs{}
	openClusterDir(t, js, dirName, walqjs.Options{Replicas: 3, Logger: logs.logger()})
	qo := walqjs.QueueOptions{Visibility: 2 * time.Second, MaxAttempts: maxAttempts, Backoff: zeroBackoff, Fence: fence}
	// One connection for the pool's three queues, on the node that leads
	// the work stream (the one restarted), one for the producers, on the
	// next.
	lead := foLeaderOf(ctx, t, "the work stream", func(ctx context.Context) string { return foReadLeaders(ctx, js, dirName).work })
	first := 0
	for i, n := range nodes {
		if n.name == lead {
			first = i
		}
	}
	poolNC, poolJS := foConnect(t, foURLs(nodes, first))
	pdir := openClusterDir(t, poolJS, dirName, walqjs.Options{Logger: logs.logger()})
	prod := map[string]*walqjs.Queue{}
	var qs []*walqjs.Queue
	var wqs []walq.WorkQueue
	g := newFoLedger()
	for i, name := range names {
		q, err := pdir.OpenQueue(ctx, name, qo)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		qs = append(qs, q)
		wq := walq.WorkQueue{Queue: &foSource{Queue: q, g: g, name: "pool", fence: fence}}
		switch i {
		case 0:
			wq.Reserved = 1
		case 1:
			wq.Weight = 2
		}
		wqs = append(wqs, wq)
		prod[name] = foOpenQueue(ctx, t, foURLs(nodes, first+1), dirName, name, logs, qo)
	}
	item := func(i int) foItem {
		return foItem{queue: names[i%3], index: i, permanent: i%17 == 0, poison: i%17 == 0}
	}
	for i := range before {
		if err := foPut(ctx, prod[names[i%3]], g, item(i)); err != nil {
			t.Fatal(err)
		}
	}
	handler := func(hctx context.Context, m walq.Message) error {
		i, err := strconv.Atoi(string(m.Body[strings.IndexByte(string(m.Body), '-')+1:]))
		if err != nil {
			return walq.Permanent(fmt.Errorf("body %q", m.Body))
		}
		d := time.Duration(2+i%19) * time.Millisecond
		if i%9 == 0 {
			d = 1200 * time.Millisecond
		}
		select {
		case <-time.After(d):
		case <-hctx.Done():
			return context.Cause(hctx)
		}
		switch {
		case i%17 == 0:
			return walq.Permanent(fmt.Errorf("item %d is refused for good", i))
		case i%11 == 0 && m.Attempt == 1:
			return fmt.Errorf("item %d fails its first attempt", i)
		}
		return nil
	}
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var poolStops []string
	poolDone := make(chan struct{})
	go func() {
		defer close(poolDone)
		for {
			err := walq.WorkQueues(wctx, wqs, 4, handler, walq.WorkOptions{Timeout: 10 * time.Second, Logger: logs.logger()})
			if wctx.Err() != nil {
				if err != nil {
					poolStops = append(poolStops, fmt.Sprintf("%s: WorkQueues returned %v at its context's end, want nil", foClock(time.Now()), err))
				}
				return
			}
			// It stopped while it should go on: a failure, recorded; the
			// pool is started again so the other checks still run.
			poolStops = append(poolStops, fmt.Sprintf("%s: WorkQueues returned while its context was live: %v", foClock(time.Now()), err))
			time.Sleep(100 * time.Millisecond)
		}
	}()
	var produced atomic.Bool
	var pwg sync.WaitGroup
	pwg.Go(func() {
		defer produced.Store(true)
		for i := before; i < before+during; i++ {
			if err := foPut(ctx, prod[names[i%3]], g, item(i)); err != nil {
				g.other("%v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	for g.settled.Load() < 100 {
		if ctx.Err() != nil {
			t.Fatalf("%d leases settled before the test's deadline, no restart", g.settled.Load())
		}
		time.Sleep(time.Millisecond)
	}
	server := poolNC.ConnectedServerName()
	victim := foNode(t, nodes, server)
	leaders := foReadLeaders(ctx, js, dirName, names...)
	foStop(t, victim)
	stoppedAt := time.Now()
	t.Logf("%s, the server of the pool's connection, stopped (SIGTERM) at %s, %d leases settled; leaders before: %s", server, foClock(stoppedAt), g.settled.Load(), leaders)
	time.Sleep(time.Second)
	foRestart(t, victim)
	t.Logf("%s started again at %s", server, foClock(time.Now()))
	foAwaitDone(ctx, t, js, dirName, qs, g, logs, produced.Load)
	t.Logf("every item resolved %v after the restart; the pool is on %s; leaders now: %s", time.Since(stoppedAt).Round(time.Millisecond), poolNC.ConnectedServerName(), foReadLeaders(ctx, js, dirName, names...))
	pwg.Wait()
	stopWork()
	select {
	case <-poolDone:
	case <-time.After(30 * time.Second):
		t.Fatal("WorkQueues did not return within 30s of its context's end")
	}
	st, err := foReadState(ctx, js, dirName, qs, g.ids())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range poolStops {
		t.Error(s)
	}
	foReport(t, g, st, maxAttempts, logs)
}

// TestR1ServerKilledMidLease: one nats-server process with a file store
// (sync_interval: always), an R1 Dir, 40 items, Visibility 20 s,
// MaxAttempts 3. Before the crash: 8 items acked, 22 leased and held, and
// each of the 10 poison items nacked twice (attempt 2 of 3). The server is
// killed with SIGKILL and started again on the same store and port. Then
// three workers on another connection run what comes: no held item may
// be handed to them before its lease ends (the server may have lost its
// consumer's memory of the deliveries, and deliver them again at once); no
// acked item may come back; the poison items have one attempt left, and
// are dead-lettered with 3 attempts (MaxAttempts holds across the crash,
// whatever the server's delivery count says). The holders Ack half their
// leases after the restart: each Ack returns nil or ErrLeaseLost, and one
// that returned nil acted on no other worker's delivery. The other half
// run out; their items come back after their leases and are acked by the
// workers.
func TestR1ServerKilledMidLease(t *testing.T) {
	const (
		items       = 40
		maxAttempts = 3
		dirName     = "for1"
		vis         = 20 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), 75*time.Second)
	defer cancel()
	store, port := t.TempDir(), freePort(t)
	srv := foStartSingle(t, store, port)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	_, js := foConnect(t, url)
	logs := &foLogs{}
	openClusterDir(t, js, dirName, walqjs.Options{Replicas: 1, Logger: logs.logger()})
	backoff := func(attempt int) time.Duration {
		if attempt >= 2 {
			return 3 * time.Second
		}
		return 0
	}
	qo := walqjs.QueueOptions{Visibility: vis, MaxAttempts: maxAttempts, Backoff: backoff}
	holderQ := foOpenQueue(ctx, t, url, dirName, "jobs", logs, qo)
	g := newFoLedger()
	for i := range items {
		if err := foPut(ctx, holderQ, g, foItem{queue: "jobs", index: i, poison: i%4 == 0}); err != nil {
			t.Fatal(err)
		}
	}
	// Before the crash, on the holders' connection.
	type holding struct {
		m walq.Message
		l *foLease
	}
	var holdings []holding
	acked, secondNacks, early := 0, 0, 0
	actx, acancel := context.WithTimeout(ctx, 20*time.Second)
	defer acancel()
	for acked+len(holdings) < items-items/4 || secondNacks < items/4 {
		m, l, ok := foGet(actx, holderQ, g, "holder")
		if !ok {
			t.Fatalf("before the crash: %d acked, %d held, %d poison items nacked on attempt 2 at the phase's deadline", acked, len(holdings), secondNacks)
		}
		it, _ := g.item(m.ID)
		switch {
		case it.poison:
			// Attempt 1 comes back at once, attempt 2 after 3 s: after
			// the crash, as a rule. One that comes back before it is
			// nacked on its last attempt (dead-lettered) and counted.
			if err := foSettle(holderQ, g, l, m.Receipt, "nack"); err != nil {
				t.Fatalf("nack of item %d attempt %d before the crash: %v", m.ID, m.Attempt, err)
			}
			switch m.Attempt {
			case 2:
				secondNacks++
			case maxAttempts:
				early++
			}
		case acked < 8:
			if err := foSettle(holderQ, g, l, m.Receipt, "ack"); err != nil {
				t.Fatalf("ack of item %d before the crash: %v", m.ID, err)
			}
			acked++
		default:
			holdings = append(holdings, holding{m, l})
		}
	}
	t.Logf("before the crash: %d acked, %d leases held (lease ends %s..%s), %d poison items nacked on attempt 2 of %d (%d already on attempt %d)",
		acked, len(holdings), foClock(holdings[0].m.LeaseEnd), foClock(holdings[len(holdings)-1].m.LeaseEnd), secondNacks, maxAttempts, early, maxAttempts)
	foKill(t, srv)
	killedAt := time.Now()
	t.Logf("SIGKILL of the server at %s", foClock(killedAt))
	time.Sleep(500 * time.Millisecond)
	foRestart(t, srv)
	// The others, on a connection of their own, as another process.
	workerQ := foOpenQueue(ctx, t, url, dirName, "jobs", logs, qo)
	t.Logf("the server started again on its store and port; the workers' queue open at %s", foClock(time.Now()))
	if c, err := js.Consumer(ctx, "WALQ_"+dirName, walqjs.ConsumerName("jobs", 0)); err == nil {
		ci := c.CachedInfo()
		t.Logf("after the restart the consumer says: %d awaiting an ack, %d pending, %d redelivered, delivered stream seq %d, ack floor stream seq %d",
			ci.NumAckPending, ci.NumPending, ci.NumRedelivered, ci.Delivered.Stream, ci.AckFloor.Stream)
	}
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var wg sync.WaitGroup
	for w := range 3 {
		name := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for {
				m, l, ok := foGet(wctx, workerQ, g, name)
				if !ok {
					return
				}
				it, _ := g.item(m.ID)
				how := "ack"
				if it.poison {
					how = "nack"
				}
				foSettle(workerQ, g, l, m.Receipt, how)
			}
		})
	}
	// The holders Ack every other lease after the restart.
	time.Sleep(time.Second)
	var okAcks, lostAcks, unknownAcks int
	for i, h := range holdings {
		if i%2 == 1 {
			continue // left to run out
		}
		err := foSettle(holderQ, g, h.l, h.m.Receipt, "ack")
		switch {
		case err == nil:
			okAcks++
		case errors.Is(err, walq.ErrLeaseLost) && errors.Is(err, walqjs.ErrUnavailable):
			unknownAcks++
		case errors.Is(err, walq.ErrLeaseLost):
			lostAcks++
		default:
			t.Errorf("the holder's Ack of item %d after the restart returned %v: want nil or ErrLeaseLost", h.m.ID, err)
		}
	}
	t.Logf("the holders' Acks after the restart: %d returned nil, %d ErrLeaseLost, %d ErrLeaseLost with the outcome unknown; %d leases left to run out",
		okAcks, lostAcks, unknownAcks, len(holdings)/2)
	foAwaitDone(ctx, t, js, dirName, []*walqjs.Queue{workerQ}, g, logs, nil)
	t.Logf("every item resolved %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	foStopWorkers(t, stopWork, &wg)
	st, err := foReadState(ctx, js, dirName, []*walqjs.Queue{workerQ}, g.ids())
	if err != nil {
		t.Fatal(err)
	}
	foReport(t, g, st, maxAttempts, logs)
}
