package crashtest

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/walq/walq/state"
)

// The ledger's queues: what it knows of each incarnation of a queue, in the
// same three states as items. An incarnation is known to exist once a call
// on it was reported done and trusted, or a check found it; its delete may
// have happened once one was started, and must have once one was reported
// done and trusted. Its pause is a list of candidates, in the order of the
// calls: the last one known durable (or the value a check found) first,
// then every pause or resume started after it. The recovered state must
// hold one of them; the check then keeps only what it found.

// incarnation is what the ledger knows of one incarnation of a queue.
type incarnation struct {
	id      uint64
	name    string
	durable bool   // known to exist on disk (its creation cannot be lost)
	delete  bool   // a delete was started and not refused: it may be gone
	deleted bool   // a delete was reported done and trusted: it must be gone
	gone    bool   // absent at a check: never again
	goneWhy string // "deleted", "never stored" or "LOST"

	pauses []*pauseOp
	// forever says that the queue is paused until resumed and no pause
	// call started since the call numbered foreverFrom: a Get started
	// after it delivers nothing.
	forever     bool
	foreverFrom uint64

	lastCounters state.Counters // at the last check
	putsIntended int            // items whose put started since the last check, duplicates excluded
}

// pauseOp is one candidate for a queue's recorded pause.
type pauseOp struct {
	kind byte // 'r' not paused (resumed, or never paused), 'f' until resumed, 't' until a time, 'x' the value a check found
	// A pause until a time: span on the child's wall clock after its
	// reading before the call, window the call's true duration (-1: a
	// clock step fell inside it, or it never returned), floor a queue time
	// at or before its record.
	span, window, floor int64
	exact               int64 // 'x'
}

func (p *pauseOp) String() string {
	switch p.kind {
	case 'r':
		return "not paused"
	case 'f':
		return "paused until resumed"
	case 't':
		return fmt.Sprintf("paused for %v (call of %v, queue time at or after %d)", time.Duration(p.span), time.Duration(p.window), p.floor)
	}
	return fmt.Sprintf("paused until %d (as last checked)", p.exact)
}

// matches says whether until, a queue's recorded PausedUntil, is what p
// leaves; now is the newest time in the log, at or after p's record.
func (p *pauseOp) matches(until, now int64) bool {
	switch p.kind {
	case 'r':
		return until == 0
	case 'f':
		return until == math.MaxInt64
	case 'x':
		return until == p.exact
	}
	if until == 0 || until == math.MaxInt64 || until <= p.floor {
		return false
	}
	// As for a deadline (checkDeadline): with no step inside the call the
	// end lies between span - window and span after the record's time.
	if p.window >= 0 {
		return until >= p.floor+p.span-p.window-deadlineTolerance && until <= now+p.span+deadlineTolerance
	}
	return true
}

// queueCounts are the queue figures of a run (Summary).
type queueCounts struct {
	pausesTimed, pausesForever int // pause calls reported done
	resumes                    int
	deletes, deletesForced     int // delete calls reported done
	recreated                  int // incarnations opened for a name that had one before
	pausesHeld                 int // queues found paused at a check, as the ledger allowed
	deletesHeld                int // incarnations found gone at a check after a delete
	sharedKeys                 int // keys held in two queues or more at once, summed over checks
}

func newIncarnation(id uint64, name string, durable bool) *incarnation {
	return &incarnation{id: id, name: name, durable: durable, pauses: []*pauseOp{{kind: 'r'}}}
}

func (inc *incarnation) String() string {
	if inc.id == 0 {
		return "the default queue"
	}
	return fmt.Sprintf("queue %s (incarnation %d)", inc.name, inc.id)
}

// inc returns the incarnation id, which a child reported before using it;
// an unknown one is a violation (and gets a placeholder).
func (l *ledger) inc(id uint64) *incarnation {
	inc := l.queues[id]
	if inc == nil {
		l.violate("report: call on queue incarnation %d, which no child opened", id)
		inc = newIncarnation(id, "?", false)
		l.queues[id] = inc
	}
	return inc
}

// maxAttempts is the MaxAttempts of e's queue.
func (l *ledger) maxAttempts(e *entry) int {
	if inc := l.queues[e.queue]; inc != nil {
		return queueMaxAttempts(inc.name)
	}
	return maxAttempts
}

// startCycle notes, before a child's report, which queues are certainly
// paused until resumed when it starts.
func (l *ledger) startCycle() {
	for _, inc := range l.queues {
		p := inc.pauses
		inc.forever = !inc.gone && len(p) == 1 && (p[0].kind == 'f' || p[0].kind == 'x' && p[0].exact == math.MaxInt64)
		inc.foreverFrom = l.calls
	}
}

// trustFrom makes op the first candidate of inc's pause: it is durable, so
// nothing before it can be what the state holds.
func (inc *incarnation) trustFrom(op *pauseOp) {
	for i, p := range inc.pauses {
		if p == op {
			inc.pauses = inc.pauses[i:]
			return
		}
	}
}

func (inc *incarnation) dropPause(op *pauseOp) {
	for i, p := range inc.pauses {
		if p == op {
			inc.pauses = append(inc.pauses[:i:i], inc.pauses[i+1:]...)
			return
		}
	}
}

func (l *ledger) queueIntent(ev event) {
	inc := l.inc(ev.queue)
	inc.forever = false
	switch ev.op {
	case "pause":
		span, _ := strconv.ParseInt(ev.args[0], 10, 64)
		op := &pauseOp{kind: 'f', window: -1}
		if span != 0 {
			op.kind, op.span, op.floor = 't', span, l.cycleFloor
		}
		inc.pauses = append(inc.pauses, op)
		l.pending[ev.n] = op
	case "resume":
		op := &pauseOp{kind: 'r'}
		inc.pauses = append(inc.pauses, op)
		l.pending[ev.n] = op
	case "delete":
		inc.delete = true
	}
}

func (l *ledger) queueDone(in, ev event, trusted bool) {
	if in.op == "open" {
		if len(ev.args) != 1 {
			l.violate("report: bad open result %q", ev.args)
			return
		}
		id, err := strconv.ParseUint(ev.args[0], 10, 64)
		if err != nil {
			l.violate("report: bad open result %q", ev.args)
			return
		}
		l.opened(in.args[0], id, trusted)
		return
	}
	inc := l.inc(in.queue)
	if trusted {
		inc.durable = true
	}
	switch in.op {
	case "pause", "resume":
		op := l.pending[in.n]
		if op == nil {
			return
		}
		if in.op == "resume" {
			l.qsum.resumes++
		} else if op.kind == 'f' {
			l.qsum.pausesForever++
			inc.forever, inc.foreverFrom = true, l.calls
		} else {
			l.qsum.pausesTimed++
			if len(ev.args) == 1 && strings.HasPrefix(ev.args[0], "w") {
				if w, err := strconv.ParseInt(ev.args[0][1:], 10, 64); err == nil {
					op.window = w
				}
			}
		}
		if trusted {
			inc.trustFrom(op)
		}
	case "delete":
		l.qsum.deletes++
		if in.args[0] == "force" {
			l.qsum.deletesForced++
		}
		if trusted {
			inc.deleted = true
		}
	}
}

// queueCallFailed takes a call on a queue that returned an expected error:
// a pause or delete so refused wrote nothing.
func (l *ledger) queueCallFailed(in, ev event) {
	switch in.op {
	case "pause", "resume":
		if op := l.pending[in.n]; op != nil {
			l.inc(in.queue).dropPause(op)
		}
	case "delete":
		l.inc(in.queue).delete = false
	}
}

// opened takes a child's report that its handle on name is on incarnation
// id: one it created, or one it found.
func (l *ledger) opened(name string, id uint64, trusted bool) {
	if inc := l.queues[id]; inc != nil {
		switch {
		case inc.name == name && !inc.gone:
			if inc.deleted {
				l.violate("%s, whose delete was reported done, was opened again", inc)
			}
			// The child found it, so no delete started before reached the
			// disk, and none ever will.
			inc.delete = false
			inc.durable = inc.durable || trusted
			return
		case inc.durable:
			l.violate("queue %s opened as incarnation %d, which was %s before (gone: %v %s)", name, id, inc, inc.gone, inc.goneWhy)
		}
		// Otherwise an incarnation whose creation was lost to a power loss,
		// its ID (an LSN) taken by a later record.
	}
	if prev, ok := l.latest[name]; ok && prev != id {
		l.qsum.recreated++
	}
	l.latest[name] = id
	l.queues[id] = newIncarnation(id, name, trusted)
}

// deliveredFrom checks a delivery of e by a get or work call in on a
// queue: the item must be of that queue, and a Get started while the
// queue was certainly paused until resumed must not have delivered.
func (l *ledger) deliveredFrom(in event, e *entry, started uint64) {
	if e.put != putRefused && e.queue != in.queue {
		l.violate("item %s of queue %d delivered by a %s on queue %d", e.tok, e.queue, in.op, in.queue)
	}
	if inc := l.queues[in.queue]; inc != nil && in.op == "get" && inc.forever && started > inc.foreverFrom {
		l.violate("item %s delivered by a Get on %s started after it was paused until resumed, with no pause or resume since",
			e.tok, inc)
	}
}

// checkQueues holds the queues of a recovered state against the ledger:
// which incarnations exist, their names and settings, and their pauses.
func (l *ledger) checkQueues(st *state.State, where string) {
	now := st.LastTime()
	present := make(map[uint64]bool)
	for _, qs := range st.Queues() {
		present[qs.ID()] = true
		idx := queueIndex(qs.Name())
		if qs.ID() != 0 && idx < 0 {
			l.violate("%s: queue %q (incarnation %d) is none of the workload's", where, qs.Name(), qs.ID())
		}
		if idx >= 0 && qs.Settings() != queueSettings(idx) {
			l.violate("%s: queue %s has settings %+v, its handles gave %+v", where, qs.Name(), qs.Settings(), queueSettings(idx))
		}
		inc := l.queues[qs.ID()]
		switch {
		case inc == nil:
			// Created by a child killed before it reported the open: no
			// call was made on it.
			inc = newIncarnation(qs.ID(), qs.Name(), true)
			l.queues[qs.ID()] = inc
			if prev, ok := l.latest[qs.Name()]; ok && prev != qs.ID() {
				l.qsum.recreated++
			}
			l.latest[qs.Name()] = qs.ID()
		case inc.name != qs.Name():
			l.violate("%s: incarnation %d is named %q, the ledger has %s", where, qs.ID(), qs.Name(), inc)
		case inc.gone:
			l.resurrected++
			l.violate("%s: %s is back after it was gone (%s)", where, inc, inc.goneWhy)
		case inc.deleted:
			l.resurrected++
			l.violate("%s: %s was deleted and the delete reported done, but it is there", where, inc)
		}
		inc.durable = true
		until := qs.PausedUntil()
		ok := false
		for _, p := range inc.pauses {
			if p.matches(until, now) {
				ok = true
				break
			}
		}
		if !ok {
			var allowed []string
			for _, p := range inc.pauses {
				allowed = append(allowed, p.String())
			}
			l.violate("%s: %s has PausedUntil %d (the log's newest time is %d); the ledger allows: %s", where, inc, until, now,
				strings.Join(allowed, "; "))
		} else if until != 0 {
			l.qsum.pausesHeld++
		}
		inc.pauses = []*pauseOp{{kind: 'x', exact: until}}
	}
	for _, inc := range l.queues {
		if inc.gone || present[inc.id] {
			continue
		}
		inc.gone = true
		switch {
		case inc.delete || inc.deleted:
			inc.goneWhy = "deleted"
			l.qsum.deletesHeld++
		case inc.durable:
			inc.goneWhy = "LOST"
			l.violate("%s: %s is gone, and no delete of it was ever started", where, inc)
		default:
			inc.goneWhy = "never stored"
		}
	}
}

// keyPool is the number of keys the producers draw from (k0, k1, ...).
const keyPool = 40

// checkKeys checks that every key a queue holds (stored, or released and
// not yet pruned) is held by an item of that queue with that key, and
// counts the keys held in several queues at once.
func (l *ledger) checkKeys(st *state.State, where string) {
	now := st.LastTime()
	queues := st.Queues()
	if len(queues) < 2 {
		return
	}
	for k := range keyPool {
		key := "k" + strconv.Itoa(k)
		holders := 0
		for _, qs := range queues {
			id, held := qs.KeyHolder(key, now, 1<<61) // every key entry kept, released or not
			if !held {
				continue
			}
			holders++
			if e := l.byID[id]; e != nil && (e.queue != qs.ID() || e.key != key) {
				l.violate("%s: key %q of queue %d is held by item %s (id %d), put into queue %d with key %q",
					where, key, qs.ID(), e.tok, id, e.queue, e.key)
			}
			if it := st.Item(id); it != nil && (it.Queue != qs.ID() || it.Key() != key) {
				l.violate("%s: key %q of queue %d is held by item %d, stored in queue %d with key %q", where, key, qs.ID(), id, it.Queue, it.Key())
			}
		}
		if holders > 1 {
			l.qsum.sharedKeys++
		}
	}
}
