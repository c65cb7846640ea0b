package crashtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walq/walq"
)

// Named queues. With Config.Queues the child opens that many named queues
// besides the default queue (q1, q2, ..., each with settings of its own:
// namedQueueOptions) and spreads every producer, consumer, sweeper and
// Work call over all of them. An admin goroutine, one call at a time,
// pauses a queue until a time or until resumed, resumes one, or deletes a
// named queue (forced or not) and creates it again under its name, which
// makes a new incarnation with a new ID. Every call names the incarnation
// it is made on in the report (@<id>), so the parent knows which queue
// each item was put into, and checks after each recovery (ledger.go and
// harness.go) that:
//
//   - every item promised is stored in the queue it was put into, under
//     the ID its put returned, with its body;
//   - an incarnation whose delete was promised never comes back, nor does
//     anything of it (items, dead letters, keys), and one whose delete was
//     never started is not lost;
//   - a pause promised durable is still recorded, until its time or until
//     resumed, and a resume promised undoes it; a Get started after a
//     pause until resumed returned never delivers until the next pause
//     call;
//   - keys are per queue: a duplicate's holder and every key held are
//     items of the same queue, and the same key is held in several queues
//     at once;
//   - each queue's recorded settings are those its handles gave;
//   - the gauges, counters and dead letters of each queue as the reopened
//     directory reports them are those of the replayed state, and each
//     queue's counters account for its items.
//
// The child checks on its own that a queue created again starts empty,
// that a deleted queue's handle returns ErrQueueDeleted, that a message
// names the queue it came from, and that a receipt is refused by another
// queue's handle.

// slot is one queue of the workload: the current handle on it and the
// incarnation that handle is on. The admin swaps both when it creates the
// queue again.
type slot struct {
	name  string // "" for the default queue
	index int    // of a named queue, for its options
	// deletes counts the deletes started on the queue: a Work handler
	// whose lease ends under one has not lost it to a late heartbeat.
	// settled counts the deletes that ended (refused, or the queue created
	// again): Work starts again after one.
	deletes, settled atomic.Uint64
	// changes counts the admin calls on the queue started and ended
	// (pause, resume, delete and create, a second handle opened and
	// closed): odd while one is under way. The consumer watch starts again
	// after one (consumers.go).
	changes atomic.Uint64

	mu sync.Mutex
	h  *walq.Queue
	id uint64
}

func (s *slot) get() (*walq.Queue, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h, s.id
}

func (s *slot) set(h *walq.Queue, id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h, s.id = h, id
}

// change marks an admin call on the queue of s as under way; call what it
// returns once the call has ended.
func (s *slot) change() func() {
	s.changes.Add(1)
	return func() { s.changes.Add(1) }
}

// pick chooses the queue of the next call: any but the quiet one
// (consumers.go).
func (c *child) pick(rng *rand.Rand) *slot {
	quiet := c.quiet.Load()
	for {
		s := c.slots[rng.IntN(len(c.slots))]
		if s != quiet || len(c.slots) == 1 {
			return s
		}
	}
}

// pickNamed chooses a named queue that is not the quiet one; nil if there
// is none.
func (c *child) pickNamed(rng *rand.Rand) *slot {
	quiet := c.quiet.Load()
	s := c.slots[1+rng.IntN(len(c.slots)-1)]
	for s == quiet && len(c.slots) > 2 {
		s = c.slots[1+rng.IntN(len(c.slots)-1)]
	}
	if s == quiet {
		return nil
	}
	return s
}

// openSlot opens (or creates) the named queue of s and reports the
// incarnation the handle is on.
func (c *child) openSlot(s *slot) {
	call := c.intent("open %s", s.name)
	h, id := c.openQueue(s)
	c.done(call, fmt.Sprint(id))
	s.set(h, id)
}

// openQueue opens (or creates) the named queue of s and returns the
// handle and the incarnation Queues lists for it.
func (c *child) openQueue(s *slot) (*walq.Queue, uint64) {
	h, err := c.q.OpenQueue(s.name, namedQueueOptions(s.index))
	if err != nil {
		c.fatal("open queue "+s.name, err)
	}
	id, ok := c.incarnation(s.name)
	if !ok {
		c.fatal("open queue "+s.name, errors.New("OpenQueue returned but Queues does not list the queue"))
	}
	return h, id
}

// incarnation is the ID of the named queue, as Queues lists it. Only the
// admin deletes and creates queues, so between its OpenQueue and this
// call the queue stays the same.
func (c *child) incarnation(name string) (uint64, bool) {
	infos, err := c.q.Queues()
	if err != nil {
		c.fatal("queues", err)
	}
	for _, info := range infos {
		if info.Name == name {
			return info.ID, true
		}
	}
	return 0, false
}

// admin pauses, resumes, deletes and re-creates queues, one call at a
// time, every few milliseconds.
func (c *child) admin(rng *rand.Rand) {
	time.Sleep(5*time.Millisecond + randDuration(rng, 40*time.Millisecond))
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	switch r := rng.IntN(100); {
	case r < 30:
		c.pause(c.pick(rng), 30*time.Millisecond+randDuration(rng, 1500*time.Millisecond))
	case r < 55:
		c.pause(c.pick(rng), 0)
	case r < 83:
		s := c.pick(rng)
		defer s.change()()
		h, qid := s.get()
		call := c.intent("resume @%d", qid)
		if err := h.Resume(); err != nil {
			c.fatal("resume", err)
		}
		c.done(call, "")
	default:
		if s := c.pickNamed(rng); s != nil {
			c.deleteAndCreate(rng, s)
		}
	}
}

// pause pauses the queue of s for span on the child's wall clock (0:
// until resumed).
func (c *child) pause(s *slot, span time.Duration) {
	defer s.change()()
	h, qid := s.get()
	steps := c.clock.steps.Load()
	start := time.Now()
	var until time.Time
	if span > 0 {
		until = c.clock.Now().Add(span)
	}
	call := c.intent("pause @%d %d", qid, int64(span))
	err := h.Pause(until)
	if errors.Is(err, walq.ErrInvalid) && span > 0 && (c.clock.steps.Load() != steps || time.Since(start) >= span) {
		// A step forward between the child's reading and the queue's, or a
		// child starved for the whole span, put the end of the pause in the
		// past: refused, nothing written.
		c.failed(call, "pause-stepped")
		return
	}
	if err != nil {
		c.fatal("pause", err)
	}
	c.done(call, c.putWindow(steps, start))
}

// deleteAndCreate deletes the queue of s, forced or not, checks that its
// handle is dead, and creates the queue again (most often at once, else
// after a few milliseconds in which the name has no queue).
func (c *child) deleteAndCreate(rng *rand.Rand, s *slot) {
	defer s.change()()
	old, qid := s.get()
	force := rng.IntN(2) == 0
	how := "soft"
	if force {
		how = "force"
	}
	s.deletes.Add(1)
	defer s.settled.Add(1)
	call := c.intent("delete @%d %s", qid, how)
	switch err := old.Delete(force); {
	case err == nil:
		c.done(call, "")
	case !force && errors.Is(err, walq.ErrQueueBusy):
		c.failed(call, "busy")
		return
	default:
		c.fatal("delete", err)
	}
	if _, _, err := old.TryGet(); !errors.Is(err, walq.ErrQueueDeleted) {
		c.rep.line("V TryGet on a handle of deleted queue %s (incarnation %d) returned %v, not ErrQueueDeleted", s.name, qid, err)
	}
	if pct(rng, 30) {
		time.Sleep(randDuration(rng, 20*time.Millisecond))
	}
	call = c.intent("open %s", s.name)
	h, id := c.openQueue(s)
	// Nothing but this goroutine has the new handle yet: the queue must be
	// empty of everything the old incarnation held.
	st := h.Stats()
	if id == qid || st.Items != 0 || st.Dead != 0 || st.Keys != 0 || st.Put != 0 || st.Paused || len(h.DeadLetters(0)) != 0 {
		c.rep.line("V queue %s created again after the delete of incarnation %d is incarnation %d with items %d, dead %d, keys %d, put %d, paused %v",
			s.name, qid, id, st.Items, st.Dead, st.Keys, st.Put, st.Paused)
	}
	c.done(call, fmt.Sprint(id)) // before any call on it can be reported
	s.set(h, id)
	old.Close()
}

// foreignReceipt hands the receipt of m, leased from the queue of s, to
// the handle of another queue: it must refuse it with ErrInvalid (or
// ErrQueueDeleted, if that queue was deleted meanwhile).
func (c *child) foreignReceipt(rng *rand.Rand, s *slot, tok string, m walq.Message) {
	o := c.pick(rng)
	if o == s {
		return
	}
	other, _ := o.get()
	if err := other.Extend(m.Receipt, visibility); !errors.Is(err, walq.ErrInvalid) && !errors.Is(err, walq.ErrQueueDeleted) {
		c.rep.line("V the receipt %s of item %s on queue %q, used on queue %q, returned %v, not ErrInvalid", m.Receipt, tok, s.name, o.name, err)
	}
}
