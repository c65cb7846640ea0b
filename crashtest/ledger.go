package crashtest

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/walq/walq/state"
)

// The ledger is the parent's knowledge of every item the children may have
// put, in three states as in pebble's randomized crash test: an item is
// known stored (its put was reported done, or it was seen), maybe stored
// (the put was started and the kill came before it returned), or known not
// stored (a duplicate key, or absent at a check after which it can never
// appear). Ends of items are tracked the same way: an ack reported done
// means the item must be gone; an ack started but not reported means it may
// be. Each check against the recovered state resolves every "maybe": an item
// present at a check exists, an item absent is gone for good (tokens are
// never reused, so it may never come back).

type putState int

const (
	putMaybe   putState = iota + 1 // started, not reported
	putDone                        // reported stored, or seen stored
	putRefused                     // refused (its key was held, or its deadline not after its due time): nothing stored
)

// entry is what the ledger knows of one item, named by its token.
type entry struct {
	tok      string
	batch    int // the put call, for the all-or-none of a PutBatch
	priority int64
	key      string
	put      putState
	queue    uint64 // the incarnation it was put into
	// id is the ID its put returned (0: none reported), idSure whether
	// that ID is durable: the put was trusted, or the item seen stored.
	id     uint64
	idSure bool

	// The deadline, checked by spans: the child asked for span (0: none)
	// from its wall clock read before the call, and the call took window
	// of true time (-1: unknown, the put never returned or a clock step
	// fell inside it). enqueueFloor is a time at or before the put's in
	// queue time; deadlineAt the deadline in queue time once it was seen
	// stored (0 until then).
	span         int64
	window       int64
	enqueueFloor int64
	deadlineAt   int64

	seen    bool   // stored at some point: present at a check, or delivered (trusted)
	counted bool   // counted in the Put counter checks
	gone    bool   // absent at a check after it may have existed: never again
	goneWhy string // why it may be gone, or "never stored"

	ackDone, ackMaybe     bool
	purgeDone, purgeMaybe bool
	expectDead            bool // dead-lettered (reported) and not redriven or purged since

	minDeliveries int32 // deliveries never go below this
	minAttempts   int32 // attempts never go below this while no redrive happened
	// The same as of the last check: a delivery reported after it must be
	// above them. (Reports of two deliveries may come in either order.)
	checkedDeliveries, checkedAttempts int32
	attemptsEpoch                      int    // redrives when minAttempts was taken
	redrives                           int    // redrive calls started for it
	lastRedrive                        uint64 // ledger.calls when the last of them started
}

type ledger struct {
	entries map[string]*entry
	// notFound are the trusted ErrNotFound answers of redrives and purges
	// since the last check (see checkNotFound).
	notFound   []notFoundAnswer
	bodies     map[uint64][]byte // the stored bodies check read, by item ID
	batches    int
	violations []string
	// calls numbers the intents in the order the parent reads them. A
	// completion line can come after the intent of a later call that its
	// call made possible (a redrive of an item whose dead-lettering is
	// still waiting for its fsync), so what a completion says about an item
	// holds only if no redrive of it started after its own intent.
	calls     uint64
	startedAt map[uint64]uint64 // call number in the report -> calls at its intent

	// The queues (queues.go): every incarnation the children reported or
	// a check found, by ID; the latest incarnation of each name; items by
	// their durable IDs; the pause call of each intent of the child being
	// ingested.
	queues  map[uint64]*incarnation
	latest  map[string]uint64
	byID    map[uint64]*entry
	pending map[uint64]*pauseOp
	qsum    queueCounts
	// keyed holds, by queue and key, the entries put with a key whose put
	// has not been reported (and some that since have: pruned as read).
	keyed map[string][]*entry

	// Counters at the last check, and what may have changed since.
	opsChecked     int // completed calls whose outcome was checked
	itemsChecked   int
	compactionsCut int // cycles killed with a Compact call in flight
	lost           int // promised items missing at a check
	resurrected    int // items back, or delivered, after they were gone for good

	// Stored bodies read back and checked byte for byte: large ones (more
	// than 4 KiB), empty ones, and the bytes of all.
	largeChecked, emptyChecked int
	bodyBytesChecked           int64

	// starved are the Work events the child saw while it was starved for
	// longer than the heartbeat can cover: the one exception docs/workers.md states.
	starved []string

	// Queue time. checkTime is the newest time in the log at the last
	// check: queue time never goes back, so every later record is at or
	// after it. cycleFloor is the floor of the child being ingested: the
	// larger of checkTime and its wall clock at Open.
	checkTime, cycleFloor int64
	deadlinesChecked      int // stored deadlines checked by span
	notFoundChecked       int // ErrNotFound answers checked (checkNotFound)
	diskRefused           int // puts refused with ErrDiskFull (Config.LowDisk)
	workRuns              int // Work handler calls
	poolRuns              int // WorkQueues handler calls
}

func newLedger() *ledger {
	l := &ledger{entries: make(map[string]*entry), startedAt: make(map[uint64]uint64),
		queues: make(map[uint64]*incarnation), latest: make(map[string]uint64), byID: make(map[uint64]*entry),
		pending: make(map[uint64]*pauseOp), keyed: make(map[string][]*entry)}
	l.queues[0] = newIncarnation(0, "", true)
	return l
}

// keyedKey is the key of ledger.keyed.
func keyedKey(queue uint64, key string) string { return strconv.FormatUint(queue, 10) + "/" + key }

// holderSure records that item holder, which holds key in queue, is
// stored as surely as an item whose put was reported done: the queue
// answers ErrDuplicate only once the holder is durable, so a trusted
// answer makes the holder promised, and a check that finds it gone
// without an ack, a purge or a deadline reports it lost. A holder whose
// own put has not been reported is the one entry of the queue waiting
// with that key; when there are several, which one it is cannot be told,
// and nothing is recorded.
func (l *ledger) holderSure(queue uint64, key string, holder uint64) {
	h := l.byID[holder]
	if h == nil {
		// An entry whose put reported this ID, but past the durable point
		// a power loss kept (not trusted): it is the holder, whatever
		// entries of the key are still unreported.
		for _, x := range l.keyed[keyedKey(queue, key)] {
			if x.id == holder {
				h = x
				l.byID[holder] = h
				break
			}
		}
	}
	if h == nil {
		// The holder is an entry of the queue with the key whose ID is not
		// known: one whose put was not reported, or one seen (delivered)
		// without its ID. Only when there is one such entry is it the
		// holder, and only one not reported needs to be made sure.
		k := keyedKey(queue, key)
		var unknown []*entry
		for _, x := range l.keyed[k] {
			if x.id == 0 && !x.gone && x.put != putRefused {
				unknown = append(unknown, x)
			}
		}
		l.keyed[k] = unknown
		if len(unknown) != 1 || unknown[0].put != putMaybe || unknown[0].seen {
			return
		}
		h = unknown[0]
		h.id = holder
		l.byID[holder] = h
	}
	if h.put == putMaybe {
		h.put = putDone
		h.idSure = true
		l.inc(h.queue).durable = true
	}
}

func (l *ledger) violate(format string, args ...any) {
	l.violations = append(l.violations, fmt.Sprintf(format, args...))
}

// cycleReport is what the parent learned from one child.
type cycleReport struct {
	ready      bool // the queue opened before the kill
	refused    bool // the child's open failed
	inCompact  bool // a Compact call was in flight at the kill
	clockSteps int  // wall-clock steps the child made
	offset     int64
	stepped    bool // offset holds the child's last reported wall-clock offset
	// watch is the child's last W line (consumers.go): queue reads,
	// those that showed Stats.Stalled, those that showed a consumer
	// stuck, and the longest run of stuck reads, in nanoseconds.
	watch [4]uint64
}

// ingest takes one child's report. trusted says whether a completion counts
// as reported done: always, except after a simulated power loss for the
// completions past the durable point the simulation kept.
func (l *ledger) ingest(events []event, trusted func(event) bool) cycleReport {
	var rep cycleReport
	intents := make(map[uint64]event)
	l.cycleFloor = l.checkTime
	l.startCycle()
	defer clear(l.pending)
	for _, ev := range events {
		switch ev.kind {
		case 'R':
			rep.ready = true
			l.cycleFloor = max(l.checkTime, ev.wall)
		case 'C':
			rep.clockSteps++
			rep.offset, rep.stepped = ev.wall, true
		case 'X':
			rep.refused = rep.refused || strings.HasPrefix(ev.args[0], "open:")
			l.violate("child failed: %s", ev.args[0])
		case 'V':
			l.violate("child saw: %s", ev.args[0])
		case 'S':
			l.starved = append(l.starved, ev.args[0])
		case 'W':
			for i, a := range ev.args {
				rep.watch[i], _ = strconv.ParseUint(a, 10, 64)
			}
		case 'I':
			intents[ev.n] = ev
			l.calls++
			l.startedAt[ev.n] = l.calls
			l.intent(ev)
		case 'D', 'E':
			in, ok := intents[ev.n]
			if !ok {
				l.violate("report: completion of call %d without its intent", ev.n)
				continue
			}
			delete(intents, ev.n)
			if ev.kind == 'D' {
				l.done(in, ev, trusted(ev), l.startedAt[ev.n])
				l.opsChecked++
			} else if in.op == "put" || in.op == "putb" {
				if ev.args[0] == "diskfull" {
					l.diskRefused++
				}
				l.refused(in)
			} else if (in.op == "redrive" || in.op == "purge") && ev.args[0] == "notfound" {
				if trusted(ev) && len(in.args) == 2 {
					l.notFound = append(l.notFound, notFoundAnswer{call: in.n, op: in.op,
						toks: strings.Split(in.args[0], ","), deliveries: strings.Split(in.args[1], ",")})
				}
			} else {
				l.queueCallFailed(in, ev)
			}
			delete(l.startedAt, ev.n)
		}
	}
	for _, in := range intents {
		delete(l.startedAt, in.n)
		switch in.op {
		case "ack":
			l.lookup(in.args[0], "ack").ackMaybe = true
		case "purge":
			for _, tok := range strings.Split(in.args[0], ",") {
				l.lookup(tok, "purge").purgeMaybe = true
			}
		case "compact":
			rep.inCompact = true
		}
	}
	if rep.inCompact {
		l.compactionsCut++
	}
	return rep
}

// refused records a put the queue refused as a whole (the child reports
// that only for a deadline a clock step moved before the due time): none of
// its items was stored.
func (l *ledger) refused(in event) {
	for _, desc := range strings.Split(in.args[0], ",") {
		if e := l.entries[strings.SplitN(desc, "/", 2)[0]]; e != nil && e.put == putMaybe {
			e.put = putRefused
			l.inc(e.queue).putsIntended--
		}
	}
}

// lookup returns the entry of tok; an unknown token is a violation (and
// gets a placeholder so the caller can go on).
func (l *ledger) lookup(tok, what string) *entry {
	e := l.entries[tok]
	if e == nil {
		l.violate("%s of item %q that was never put", what, tok)
		e = &entry{tok: tok, put: putRefused, gone: true}
		l.entries[tok] = e
	}
	return e
}

func (l *ledger) intent(ev event) {
	switch ev.op {
	case "put", "putb":
		l.batches++
		for _, desc := range strings.Split(ev.args[0], ",") {
			f := strings.Split(desc, "/")
			if len(f) != 4 {
				l.violate("report: bad item %q", desc)
				continue
			}
			if l.entries[f[0]] != nil {
				l.violate("report: token %s put twice", f[0])
				continue
			}
			span, _ := strconv.ParseInt(f[1], 10, 64)
			prio, _ := strconv.ParseInt(f[2], 10, 64)
			key := f[3]
			if key == "-" {
				key = ""
			}
			e := &entry{tok: f[0], batch: l.batches, span: span, window: -1, enqueueFloor: l.cycleFloor,
				priority: prio, key: key, put: putMaybe, queue: ev.queue}
			l.entries[f[0]] = e
			if key != "" {
				k := keyedKey(ev.queue, key)
				l.keyed[k] = append(l.keyed[k], e)
			}
			l.inc(ev.queue).putsIntended++
		}
	case "redrive":
		for _, tok := range strings.Split(ev.args[0], ",") {
			e := l.lookup(tok, "redrive")
			e.redrives++
			e.lastRedrive = l.calls
			e.expectDead = false
		}
	case "pause", "resume", "delete":
		l.queueIntent(ev)
	}
}

func (l *ledger) done(in, ev event, trusted bool, started uint64) {
	switch in.op {
	case "put", "putb":
		descs := strings.Split(in.args[0], ",")
		if len(ev.args) != 2 || !strings.HasPrefix(ev.args[1], "w") {
			l.violate("report: bad put result %q", ev.args)
			return
		}
		results := strings.Split(ev.args[0], ",")
		if len(results) != len(descs) {
			l.violate("report: put of %d items returned %d results", len(descs), len(results))
			return
		}
		window, err := strconv.ParseInt(ev.args[1][1:], 10, 64)
		if err != nil {
			window = -1 // "w?": a clock step fell inside the call
		}
		for i, res := range results {
			e := l.entries[strings.SplitN(descs[i], "/", 2)[0]]
			if e == nil || strings.HasPrefix(res, "d") {
				continue
			}
			e.window = window
			e.id, _ = strconv.ParseUint(res, 10, 64)
			if trusted {
				e.put = putDone
				e.idSure = true
				l.byID[e.id] = e
				l.inc(e.queue).durable = true
			}
		}
		// Every refusal of the call first: a batch may hold the key twice,
		// and a sibling refused too must not pass for the holder in
		// holderSure, as one not reported yet would.
		for i, res := range results {
			e := l.entries[strings.SplitN(descs[i], "/", 2)[0]]
			if e == nil || !strings.HasPrefix(res, "d") {
				continue
			}
			e.window = window
			e.put = putRefused // nothing was stored for it, durable or not
			l.inc(e.queue).putsIntended--
		}
		for i, res := range results {
			e := l.entries[strings.SplitN(descs[i], "/", 2)[0]]
			if e == nil || !strings.HasPrefix(res, "d") {
				continue
			}
			// Keys are per queue: the holder is an item of the same queue
			// with the same key.
			holder, _ := strconv.ParseUint(res[1:], 10, 64)
			if h := l.byID[holder]; h != nil && (h.queue != e.queue || h.key != e.key) {
				l.violate("item %s put into queue %d with key %q refused as a duplicate of item %s (id %d), put into queue %d with key %q",
					e.tok, e.queue, e.key, h.tok, holder, h.queue, h.key)
			} else if trusted {
				l.holderSure(e.queue, e.key, holder)
			}
		}
	case "get", "work", "pool":
		switch in.op {
		case "work":
			l.workRuns++
		case "pool":
			l.poolRuns++
		}
		if len(ev.args) != 4 {
			l.violate("report: bad get result %q", ev.args)
			return
		}
		e := l.lookup(ev.args[0], "delivery")
		attempt, _ := strconv.Atoi(ev.args[2])
		deliveries, _ := strconv.Atoi(ev.args[3])
		l.deliveredFrom(in, e, started)
		maxAttempts := l.maxAttempts(e)
		if e.gone {
			l.resurrected++
			l.violate("item %s delivered (attempt %d) after it was gone (%s)", e.tok, attempt, e.goneWhy)
		}
		if int32(deliveries) <= e.checkedDeliveries {
			l.violate("item %s delivered with deliveries %d, but %d were known before: deliveries went backwards",
				e.tok, deliveries, e.checkedDeliveries)
		}
		if attempt < 1 || attempt > maxAttempts {
			l.violate("item %s delivered as attempt %d, outside 1..%d", e.tok, attempt, maxAttempts)
		}
		if e.redrives == e.attemptsEpoch && int32(attempt) <= e.checkedAttempts {
			l.violate("item %s delivered as attempt %d, but %d attempts were known before and it was never redriven",
				e.tok, attempt, e.checkedAttempts)
		}
		if trusted {
			e.seen = true
			e.minDeliveries = max(e.minDeliveries, int32(deliveries))
			if e.lastRedrive < started && e.redrives == e.attemptsEpoch {
				e.minAttempts = max(e.minAttempts, int32(attempt))
			}
		}
	case "ack":
		e := l.lookup(in.args[0], "ack")
		if trusted {
			e.ackDone = true
		} else {
			e.ackMaybe = true
		}
	case "dead":
		if e := l.lookup(in.args[0], "dead-letter"); trusted && e.lastRedrive < started {
			e.expectDead = true
		}
	case "purge":
		for _, tok := range strings.Split(in.args[0], ",") {
			e := l.lookup(tok, "purge")
			if trusted {
				e.purgeDone = true
			} else {
				e.purgeMaybe = true
			}
		}
	case "open", "pause", "resume", "delete":
		l.queueDone(in, ev, trusted)
	}
}

// check compares the ledger with the state recovered from the directory,
// resolves every "maybe", and returns how many violations it added.
// body reads a stored item's body (from the log, checked by its CRC); a
// body that cannot be read or fails its check is a violation, like a lost
// item.
func (l *ledger) check(st *state.State, body func(*state.Item) ([]byte, error), where string) int {
	before := len(l.violations)
	// Every discard was written at or before the newest time in the log:
	// an item may be gone for its deadline only if that deadline is at or
	// before it (plus a backoff: a nack discards an item whose next due
	// time would reach its deadline).
	now := st.LastTime()
	l.checkQueues(st, where)
	present := make(map[string]*state.Item)
	l.bodies = make(map[uint64][]byte)
	st.Each(func(it *state.Item) {
		b, err := body(it)
		if err != nil {
			l.violate("%s: item %d stored in queue %d: its body cannot be read: %v", where, it.ID, it.Queue, err)
			return
		}
		l.bodies[it.ID] = b
		tok := itemToken(b, it.Key())
		if tok == "" || l.entries[tok] == nil {
			l.violate("%s: unknown item %d stored in queue %d: body %q", where, it.ID, it.Queue, truncate(b, 60))
			return
		}
		present[tok] = it
	})
	materialized := make(map[int]bool)
	for tok, e := range l.entries {
		if present[tok] != nil || e.seen || e.put == putDone {
			materialized[e.batch] = true
		}
	}
	// Per incarnation: items newly known stored, and stored items gone.
	newlyStored, removed := make(map[uint64]int), make(map[uint64]int)
	for tok, e := range l.entries {
		l.itemsChecked++
		it := present[tok]
		if it == nil {
			if e.idSure {
				if other := st.Item(e.id); other != nil {
					l.violate("%s: item %s is not stored, but its ID %d, which its put returned, holds item %q of queue %d",
						where, tok, e.id, itemToken(l.bodies[other.ID], other.Key()), other.Queue)
				}
			}
			if e.gone {
				continue
			}
			if inc := l.inc(e.queue); inc.gone {
				// Its queue was deleted (or its creation never stored):
				// every item of it went with it, whatever it was.
				e.gone, e.goneWhy = true, "its queue is gone: "+inc.goneWhy
				continue
			}
			// An item of a PutBatch that never returned may have been refused
			// for its key while the others were stored (not for a key that
			// is its own token: an empty body's, held by nothing else).
			maybeDup := e.put == putMaybe && e.key != "" && e.key != e.tok
			if e.put != putRefused && (e.seen || e.put == putDone || (materialized[e.batch] && !maybeDup)) {
				switch {
				case e.ackDone || e.ackMaybe:
					e.goneWhy = "acked"
				case e.purgeDone || e.purgeMaybe:
					e.goneWhy = "purged"
				case e.span != 0 && e.earliestDeadline() <= now+int64(maxBackoff):
					e.goneWhy = "discarded at its deadline"
				default:
					e.goneWhy = "LOST"
					l.lost++
					l.violate("%s: item %s lost (queue %d): its put was reported done (or it was stored) and it was neither acked, purged nor past its deadline",
						where, tok, e.queue)
				}
				if !e.counted {
					newlyStored[e.queue]++
					e.counted = true
				}
				removed[e.queue]++
			} else {
				e.goneWhy = "never stored"
			}
			e.gone = true
			continue
		}
		l.checkPresent(e, it, where)
		if !e.counted {
			newlyStored[e.queue]++
			e.counted = true
		}
	}
	for _, qs := range st.Queues() {
		inc := l.inc(qs.ID())
		c := qs.Counters()
		prev := inc.lastCounters
		if got := int(c.Put - prev.Put); got < newlyStored[inc.id] || got > inc.putsIntended {
			l.violate("%s: %s: Put counter grew by %d since the last check; the ledger has %d items newly stored and %d puts started",
				where, inc, got, newlyStored[inc.id], inc.putsIntended)
		}
		if got := int(c.Acked + c.Discarded + c.Purged - prev.Acked - prev.Discarded - prev.Purged); got < removed[inc.id] {
			l.violate("%s: %s: %d stored items are gone but the acked+discarded+purged counters grew by %d", where, inc, removed[inc.id], got)
		}
		inc.lastCounters = c
	}
	for _, inc := range l.queues {
		inc.putsIntended = 0
	}
	l.checkNotFound(present, where)
	l.checkKeys(st, where)
	l.checkTime = max(l.checkTime, now)
	return len(l.violations) - before
}

// notFoundAnswer is a redrive or purge answered ErrNotFound: of the dead
// letters it named, as DeadLetters listed them (with their deliveries),
// one was no longer dead when it was answered.
type notFoundAnswer struct {
	call       uint64
	op         string
	toks       []string
	deliveries []string
}

// checkNotFound holds each ErrNotFound answer to the recovered state. The
// dead letter that was gone was taken by another redrive or purge, and the
// queue answers only once what it answers from is durable: so after
// recovery, one of the named items is not a dead letter, or is one again
// after a later delivery (more deliveries than listed). Every one of them
// dead with the deliveries it was listed with means the answer rested on
// a change the crash took back.
func (l *ledger) checkNotFound(present map[string]*state.Item, where string) {
	for _, a := range l.notFound {
		if len(a.deliveries) != len(a.toks) {
			l.violate("report: %s call %d names %d items and %d delivery counts", a.op, a.call, len(a.toks), len(a.deliveries))
			continue
		}
		asListed := true
		for i, tok := range a.toks {
			it := present[tok]
			if it == nil || it.Status != state.Dead || strconv.Itoa(int(it.Deliveries)) != a.deliveries[i] {
				asListed = false
				break
			}
		}
		l.notFoundChecked++
		if asListed {
			l.violate("%s: %s call %d was answered ErrNotFound, but every item it named (%s) is a dead letter with the deliveries it was listed with: what took one of them was not durable",
				where, a.op, a.call, strings.Join(a.toks, ","))
		}
	}
	l.notFound = l.notFound[:0]
}

// deadlineTolerance is how far a stored deadline may lie outside the span
// the ledger derives for it. The queue reads the wall clock once for the
// translation and its monotonic clock for queue time; the child measured
// the call's window with Go's monotonic clock. Wall and monotonic time
// advance at rates that differ only while NTP slews the wall clock, by at
// most 500 ppm, which over a call of even a second is half a millisecond;
// the readings themselves are exact to the nanosecond. A millisecond covers
// that, and is still far below any step the child makes (at least a
// second) or any span it asks for (at least 300 ms).
const deadlineTolerance = int64(time.Millisecond)

// earliestDeadline is a queue time at or before the item's deadline: the
// one seen stored, or else the floor of its put plus the span less the
// call's window (the deadline is after the due time, so after the put, if
// the window is unknown).
func (e *entry) earliestDeadline() int64 {
	switch {
	case e.deadlineAt != 0:
		return e.deadlineAt
	case e.window >= 0:
		return e.enqueueFloor + e.span - e.window - deadlineTolerance
	}
	return e.enqueueFloor
}

// checkDeadline checks a stored item's times against what its put asked
// for. The child computed the deadline as its wall clock w0 (read before
// the call) plus span; the queue stored it as queue time t1 plus that
// wall time less its own wall reading w1 (read inside the call, after t1,
// the time of the put record). So, with no clock step inside the call,
// deadline - EnqueuedAt = span - (w1 - w0) + (t1' - t1), where t1' is the
// queue time read for the translation, just before w1: it lies between
// span - window and span. With a step inside the call only the sign is
// known: the deadline is after the put.
func (l *ledger) checkDeadline(e *entry, it *state.Item) string {
	switch {
	case it.EnqueuedAt < e.enqueueFloor:
		return fmt.Sprintf("put at queue time %d, before %d: queue time went back (the log's newest time or the wall clock at Open)",
			it.EnqueuedAt, e.enqueueFloor)
	case (it.Deadline() == 0) != (e.span == 0):
		return fmt.Sprintf("deadline %d stored, put with a span of %v", it.Deadline(), time.Duration(e.span))
	case it.Deadline() == 0:
		return ""
	case e.deadlineAt != 0 && it.Deadline() != e.deadlineAt:
		return fmt.Sprintf("deadline moved from %d to %d", e.deadlineAt, it.Deadline())
	}
	got := it.Deadline() - it.EnqueuedAt
	// A step inside the call moves the translated deadline by the step,
	// either way: only the sign is known.
	lo, hi := int64(1), int64(math.MaxInt64)
	if e.window >= 0 {
		lo, hi = e.span-e.window-deadlineTolerance, e.span+deadlineTolerance
		l.deadlinesChecked++
	}
	if got < lo || got > hi {
		return fmt.Sprintf("deadline %v after the put, put with a span of %v in a call of %v",
			time.Duration(got), time.Duration(e.span), time.Duration(e.window))
	}
	return ""
}

func (l *ledger) checkPresent(e *entry, it *state.Item, where string) {
	bad := func(format string, args ...any) {
		l.violate("%s: item %s (id %d): %s", where, e.tok, it.ID, fmt.Sprintf(format, args...))
	}
	switch {
	case e.gone:
		l.resurrected++
		bad("stored again after it was gone (%s)", e.goneWhy)
	case e.put == putRefused:
		bad("stored although its put was refused")
	case e.ackDone:
		l.resurrected++
		bad("acked and reported done, but it came back (%s)", it.Status)
	case e.purgeDone:
		l.resurrected++
		bad("purged and reported done, but it came back (%s)", it.Status)
	}
	if b := l.bodies[it.ID]; !checkBody(e.tok, b) {
		bad("body differs from what was put")
	} else {
		l.bodyBytesChecked += int64(len(b))
		switch {
		case len(b) == 0:
			l.emptyChecked++
		case len(b) > 4<<10:
			l.largeChecked++
		}
	}
	if it.Queue != e.queue {
		bad("stored in queue %d, put into queue %d", it.Queue, e.queue)
	}
	if inc := l.inc(e.queue); inc.gone {
		l.resurrected++
		bad("stored, but its queue is gone (%s)", inc.goneWhy)
	}
	if e.id != 0 && it.ID != e.id {
		bad("stored under ID %d, its put returned %d", it.ID, e.id)
	}
	if it.Priority != e.priority || it.Key() != e.key {
		bad("priority/key %d/%q, put with %d/%q", it.Priority, it.Key(), e.priority, e.key)
	}
	if why := l.checkDeadline(e, it); why != "" {
		bad("%s", why)
	}
	e.deadlineAt = it.Deadline()
	if it.Deliveries < e.minDeliveries {
		bad("deliveries went backwards: %d, %d known before", it.Deliveries, e.minDeliveries)
	}
	if e.redrives == e.attemptsEpoch && it.Attempts < e.minAttempts {
		bad("attempts went from %d to %d without a redrive", e.minAttempts, it.Attempts)
	}
	if maxAttempts := l.maxAttempts(e); it.Attempts > it.Deliveries || int(it.Attempts) > maxAttempts {
		bad("attempts %d with %d deliveries and MaxAttempts %d", it.Attempts, it.Deliveries, maxAttempts)
	}
	if e.expectDead && it.Status != state.Dead {
		bad("dead-lettered and reported done, never redriven, but it is %s", it.Status)
	}
	if it.Status == state.Leased {
		bad("still leased after recovery")
	}
	e.seen, e.put = true, putDone
	e.id, e.idSure = it.ID, true
	l.byID[it.ID] = e
	e.ackMaybe, e.purgeMaybe = false, false
	e.minDeliveries, e.checkedDeliveries = it.Deliveries, it.Deliveries
	e.minAttempts, e.checkedAttempts, e.attemptsEpoch = it.Attempts, it.Attempts, e.redrives
}

// drained records that the final drain delivered and acked tok, from
// the queue of incarnation queue.
func (l *ledger) drained(tok string, queue uint64, attempt, deliveries int) {
	e := l.lookup(tok, "drain")
	if e.queue != queue {
		l.violate("drain: item %s of queue %d delivered by queue %d", tok, e.queue, queue)
	}
	if e.gone {
		l.resurrected++
		l.violate("drain: item %s delivered after it was gone (%s)", tok, e.goneWhy)
	}
	if int32(deliveries) <= e.checkedDeliveries {
		l.violate("drain: item %s has %d deliveries, %d known before", tok, deliveries, e.checkedDeliveries)
	}
	e.ackDone = true
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
