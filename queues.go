package walq

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// QueueOptions are the settings of a named queue, given each time a handle
// is made with OpenQueue. The zero value of a field takes the directory's
// Options value (Visibility, MaxAttempts, Backoff, KeyWindow) or means no
// bound (MaxItems, MaxBytes, MaxInFlight).
//
// Every field but Backoff is recorded in the log when it changes, so the
// queue keeps its settings across restarts and walq-inspect shows them
// offline. Backoff is code: it is not recorded, and until a handle gives
// it after a restart (an expiry at recovery, say) the directory's
// Options.Backoff applies.
type QueueOptions struct {
	Visibility  time.Duration
	MaxAttempts int
	Backoff     func(attempt int) time.Duration
	KeyWindow   time.Duration
	MaxItems    int
	MaxBytes    int64
	// MaxInFlight caps the queue's open leases: a Get, TryGet or Work on a
	// queue at its cap waits as if it were empty. It is enforced on every
	// lease, and replay checks it.
	MaxInFlight int
}

// settings are the effective settings of one queue.
type settings struct {
	visibility  time.Duration
	maxAttempts int
	backoff     func(int) time.Duration
	keyWindow   time.Duration
	maxItems    int
	maxBytes    int64
	maxInFlight int
}

func (s settings) record() state.Settings {
	return state.Settings{
		Visibility: int64(s.visibility), MaxAttempts: int64(s.maxAttempts), KeyWindow: int64(s.keyWindow),
		MaxItems: int64(s.maxItems), MaxBytes: s.maxBytes, MaxInFlight: int64(s.maxInFlight),
	}
}

// defaultSettings are the default queue's settings: its Options.
func (o Options) defaultSettings() settings {
	return settings{
		visibility: o.Visibility, maxAttempts: o.MaxAttempts, backoff: o.Backoff, keyWindow: o.KeyWindow,
		maxItems: o.MaxItems, maxBytes: o.MaxBytes, maxInFlight: o.MaxInFlight,
	}
}

// queueSettings checks qo and fills its zero fields from o.
func (o Options) queueSettings(name string, qo QueueOptions) (settings, error) {
	bad := func(field string, v any, why string) (settings, error) {
		return settings{}, fmt.Errorf("%w: queue %q: QueueOptions.%s = %v: %s", ErrInvalid, name, field, v, why)
	}
	switch {
	case qo.Visibility < 0 || qo.Visibility > MaxDuration:
		return bad("Visibility", qo.Visibility, "negative or over MaxDuration")
	case qo.MaxAttempts < 0:
		return bad("MaxAttempts", qo.MaxAttempts, "negative")
	case qo.KeyWindow < 0 || qo.KeyWindow > MaxDuration:
		return bad("KeyWindow", qo.KeyWindow, "negative or over MaxDuration")
	case qo.MaxItems < 0:
		return bad("MaxItems", qo.MaxItems, "negative")
	case qo.MaxBytes < 0:
		return bad("MaxBytes", qo.MaxBytes, "negative")
	case qo.MaxInFlight < 0:
		return bad("MaxInFlight", qo.MaxInFlight, "negative")
	}
	s := settings{visibility: qo.Visibility, maxAttempts: qo.MaxAttempts, backoff: qo.Backoff, keyWindow: qo.KeyWindow,
		maxItems: qo.MaxItems, maxBytes: qo.MaxBytes, maxInFlight: qo.MaxInFlight}
	if s.visibility == 0 {
		s.visibility = o.Visibility
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = o.MaxAttempts
	}
	if s.backoff == nil {
		s.backoff = o.Backoff
	}
	if s.keyWindow == 0 {
		s.keyWindow = o.KeyWindow
	}
	return s, nil
}

// settingsFromRecord are the settings of a queue known only from the log
// (no handle has given its Backoff yet).
func (o Options) settingsFromRecord(r state.Settings) settings {
	return settings{
		visibility: time.Duration(r.Visibility), maxAttempts: int(r.MaxAttempts), backoff: o.Backoff,
		keyWindow: time.Duration(r.KeyWindow), maxItems: int(r.MaxItems), maxBytes: r.MaxBytes, maxInFlight: int(r.MaxInFlight),
	}
}

// queueRT is what the directory keeps for one incarnation of a queue while
// it is open: its settings, its blocked Gets, its watchers and its
// counters. All handles of the incarnation share it.
type queueRT struct {
	id   uint64
	name string
	set  settings // under mu; set by setSettings
	// vis is set.visibility, read without mu: Work reads it at every
	// lease, and mu is the hot lock.
	vis atomic.Int64

	waiters  waiterList    // blocked Gets, oldest first; under mu
	woken    int           // Gets signalled (and so out of waiters) not yet back for an item; under mu
	watchers []*watcher    // WorkQueues calls watching it; under mu
	deleted  chan struct{} // closed when the queue is deleted
	gone     bool          // deleted; under mu
	work     WorkCounters  // Work's counters (worker.go)
	lateAcks atomic.Uint64

	wakeAt  int64 // its time in the timer's order, math.MaxInt64 when none (timer.go); under mu
	wakePos int   // its index in that order, -1 when not in it; under mu
}

func newRT(id uint64, name string, set settings) *queueRT {
	rt := &queueRT{id: id, name: name, deleted: make(chan struct{}), wakeAt: math.MaxInt64, wakePos: -1}
	rt.setSettings(set)
	return rt
}

// setSettings sets the settings in force; the caller holds mu (or is the
// only one who has rt).
func (rt *queueRT) setSettings(set settings) {
	rt.set = set
	rt.vis.Store(int64(set.visibility))
}

// label names the queue in errors and logs.
func (rt *queueRT) label() string {
	if rt.id == state.DefaultQueue {
		return "the default queue"
	}
	return fmt.Sprintf("queue %q (incarnation %d)", rt.name, rt.id)
}

// watcher is told, through a channel with room for one signal, of every
// change that may let a queue lease: WorkQueues waits on it instead of
// blocking in Get on each queue.
type watcher struct {
	ch chan struct{}
	fn func() // instead of ch: called under mu, so it must not block or take mu (watchFunc)
}

// ErrQueueDeleted and ErrQueueBusy are the errors of named queues.
var (
	// ErrQueueDeleted is returned by every call on a handle whose queue was
	// deleted, and by a Get or Work blocked on it when it is. A queue of
	// the same name opened later is a new queue: the old handle never
	// reaches it.
	ErrQueueDeleted = errors.New("walq: queue deleted")

	// ErrQueueBusy is returned by Delete, without force, for a queue with
	// leases open. Nothing is changed.
	ErrQueueBusy = errors.New("walq: queue has leases open")
)

// OpenQueue returns a handle on the named queue of q's directory, creating
// it when there is none with opts as its settings: a zero Visibility,
// MaxAttempts or KeyWindow is the directory's Options, a zero MaxItems,
// MaxBytes or MaxInFlight no bound. The creation is durable, under the
// sync policy, when OpenQueue returns. Names are 1 to 100 bytes of ASCII
// letters, digits, '.', '_' and '-', starting with a letter or digit; a
// bad name is ErrInvalid and says why.
//
// Opening a queue that exists never changes its settings: a zero field of
// opts keeps what is recorded, and a field that differs from the record is
// ErrInvalid, which names it; SetSettings changes them. So a component
// that opens a queue only to put into it, or a tool that opens it to pause
// it, passes QueueOptions{} and leaves its caps as they are. Backoff is not
// recorded: a non-nil Backoff applies to the queue in this process.
//
// A named queue has the methods of the default queue; its items, keys,
// dead letters, counters and settings are its own, and it shares the
// directory's log, group commit, timer and compaction. Item IDs are unique
// in the directory. Handles of one queue share its state and settings.
func (q *Queue) OpenQueue(name string, opts QueueOptions) (*Queue, error) {
	if err := state.CheckQueueName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	set, err := q.opts.queueSettings(name, opts)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	now := q.qt.now()
	var rt *queueRT
	var commit *wal.Commit
	if qs := q.st.QueueByName(name); qs == nil {
		var lsn uint64
		lsn, commit, err = q.appendToLocked(state.DefaultQueue, &state.CreateQueue{Time: now, Name: name, Settings: set.record()})
		if err != nil {
			q.mu.Unlock()
			return nil, err
		}
		rt = newRT(lsn, name, set)
		q.rts[lsn] = rt
		q.opts.Logger.Info("walq: queue created", "queue", name, "id", lsn)
	} else {
		rt = q.rts[qs.ID()]
		if err := sameSettings(name, opts, qs.Settings()); err != nil {
			return nil, q.answerLocked(err) // the settings it compares may not be durable yet
		}
		if opts.Backoff != nil {
			rt.set.backoff = opts.Backoff
		}
		// The queue and its settings may rest on records not durable yet.
		commit = q.log.Barrier()
	}
	q.mu.Unlock()
	if commit != nil {
		if err := q.wait(commit); err != nil {
			return nil, err
		}
	}
	return &Queue{directory: q.directory, rt: rt, detached: make(chan struct{})}, nil
}

// sameSettings is nil when every non-zero field of opts, but Backoff, is
// what rec records, and otherwise ErrInvalid naming the first that is not.
func sameSettings(name string, opts QueueOptions, rec state.Settings) error {
	for _, f := range []struct {
		field      string
		given, has int64
		show       func(int64) any
	}{
		{"Visibility", int64(opts.Visibility), rec.Visibility, showDuration},
		{"MaxAttempts", int64(opts.MaxAttempts), rec.MaxAttempts, showInt},
		{"KeyWindow", int64(opts.KeyWindow), rec.KeyWindow, showDuration},
		{"MaxItems", int64(opts.MaxItems), rec.MaxItems, showInt},
		{"MaxBytes", opts.MaxBytes, rec.MaxBytes, showInt},
		{"MaxInFlight", int64(opts.MaxInFlight), rec.MaxInFlight, showInt},
	} {
		if f.given != 0 && f.given != f.has {
			return fmt.Errorf("%w: queue %q exists with %s %v, opened with %v: opening never changes a queue's settings "+
				"(pass 0 to keep what is recorded, or change it with SetSettings)", ErrInvalid, name, f.field, f.show(f.has), f.show(f.given))
		}
	}
	return nil
}

func showDuration(v int64) any { return time.Duration(v) }
func showInt(v int64) any      { return v }

// Settings returns the queue's settings as recorded (for the default
// queue: its Options), with the Backoff its handles use in this process.
func (q *Queue) Settings() QueueOptions {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.rt.set
	return QueueOptions{
		Visibility: s.visibility, MaxAttempts: s.maxAttempts, Backoff: s.backoff, KeyWindow: s.keyWindow,
		MaxItems: s.maxItems, MaxBytes: s.maxBytes, MaxInFlight: s.maxInFlight,
	}
}

// SetSettings replaces the named queue's settings with opts, filled as
// OpenQueue fills a new queue's (a zero Visibility, MaxAttempts or
// KeyWindow is the directory's Options; a zero MaxItems, MaxBytes or
// MaxInFlight is no bound; a nil Backoff keeps the one in use), for every
// handle of the queue. The change is recorded, and durable under the sync
// policy when SetSettings returns; to change one field, change it in what
// Settings returns. Leases open keep their ends; a raised MaxInFlight
// wakes the Gets it lets lease. The default queue's settings are the
// Options given to Open and are not recorded: SetSettings on it is
// ErrInvalid.
func (q *Queue) SetSettings(opts QueueOptions) error {
	if q.rt.id == state.DefaultQueue {
		return fmt.Errorf("%w: the default queue's settings are the Options given to Open", ErrInvalid)
	}
	set, err := q.opts.queueSettings(q.rt.name, opts)
	if err != nil {
		return err
	}
	q.mu.Lock()
	if err := q.callLocked(); err != nil {
		return q.answerLocked(err) // a delete, say, not durable yet
	}
	if opts.Backoff == nil {
		set.backoff = q.rt.set.backoff
	}
	if q.st.Queue(q.rt.id).Settings() == set.record() {
		q.rt.setSettings(set)
		return q.answerLocked(nil)
	}
	// The settings apply before their record, whose wake-up (a cap
	// raised) must see them; a failed append fails the queue.
	q.rt.setSettings(set)
	_, commit, err := q.appendToLocked(q.rt.id, &state.SetQueue{Time: q.qt.now(), Settings: set.record()})
	q.mu.Unlock()
	if err != nil {
		return err
	}
	q.opts.Logger.Info("walq: queue settings changed", "queue", q.rt.name, "id", q.rt.id)
	return q.wait(commit)
}

// Name is the queue's name ("" for the default queue).
func (q *Queue) Name() string { return q.rt.name }

// callLocked returns why a call on this handle cannot be made, or nil: the
// directory closed or failed, the handle closed, or its queue deleted.
func (q *Queue) callLocked() error {
	if err := q.usableLocked(); err != nil {
		return err
	}
	if q.rt.gone {
		return fmt.Errorf("%w: %s", ErrQueueDeleted, q.rt.label())
	}
	if q.detached != nil {
		select {
		case <-q.detached:
			return fmt.Errorf("%w: the handle on %s", ErrClosed, q.rt.label())
		default:
		}
	}
	return nil
}

// Pause stops the queue delivering until the wall-clock time until (the
// zero Time: until Resume). A paused queue takes puts, ends leases,
// expires and discards as usual, and keeps its pause across restarts.
// Pausing a paused queue replaces its pause.
func (q *Queue) Pause(until time.Time) error {
	return q.setPause(until, true)
}

// Resume ends the queue's pause; a queue not paused is left as it is.
func (q *Queue) Resume() error {
	return q.setPause(time.Time{}, false)
}

func (q *Queue) setPause(until time.Time, pause bool) error {
	q.mu.Lock()
	if err := q.callLocked(); err != nil {
		return q.answerLocked(err) // a delete, say, not durable yet
	}
	now := q.qt.now()
	rec := &state.PauseQueue{Time: now}
	if pause {
		rec.Until = math.MaxInt64
		if !until.IsZero() {
			rec.Until = q.qt.fromWall(until)
			if rec.Until <= now {
				q.mu.Unlock()
				return fmt.Errorf("%w: pause %s until %v, which has passed", ErrInvalid, q.rt.label(), until.UTC().Format(time.RFC3339Nano))
			}
		}
	} else if q.st.Queue(q.rt.id).PausedUntil() == 0 {
		return q.answerLocked(nil) // not paused: unless its resume is not durable yet
	}
	_, commit, err := q.appendToLocked(q.rt.id, rec)
	q.mu.Unlock()
	if err != nil {
		return err
	}
	q.opts.Logger.Info("walq: queue paused or resumed", "queue", q.rt.name, "paused", pause, "until", until)
	return q.wait(commit)
}

// Delete deletes the queue with its items, keys, counters and dead
// letters; its bodies' disk space comes back as compaction reclaims the
// files that hold them, once less than half of each is live (a delete is
// not an erasure of the bytes). It refuses,
// with ErrQueueBusy, a queue with leases open unless force is set (their
// receipts then return ErrQueueDeleted). Every handle of the queue, and
// every Get and Work blocked on it, returns ErrQueueDeleted from then on.
// The default queue cannot be deleted.
func (q *Queue) Delete(force bool) error {
	if q.rt.id == state.DefaultQueue {
		return fmt.Errorf("%w: the default queue cannot be deleted", ErrInvalid)
	}
	q.mu.Lock()
	if err := q.callLocked(); err != nil {
		return q.answerLocked(err) // a delete, say, not durable yet
	}
	qs := q.st.Queue(q.rt.id)
	if n := qs.Leased(); n > 0 && !force {
		return q.answerLocked(fmt.Errorf("%w: delete %s: %d leases open (force to delete anyway)", ErrQueueBusy, q.rt.label(), n))
	}
	items := qs.Len()
	_, commit, err := q.appendToLocked(q.rt.id, &state.DeleteQueue{Time: q.qt.now(), Force: force})
	if err == nil {
		rt := q.rt
		rt.gone = true
		delete(q.rts, rt.id)
		q.wakes.set(rt, math.MaxInt64)
	}
	q.mu.Unlock()
	if err != nil {
		return err
	}
	if err := q.wait(commit); err != nil {
		return err
	}
	// Blocked Gets and Work learn of the deletion once it is durable: a
	// failed write fails the directory instead, and they return that.
	q.mu.Lock()
	close(q.rt.deleted)
	q.rt.signalWatchersLocked() // Gets see rt.deleted; a watch learns it from TryGet
	q.mu.Unlock()
	q.opts.Logger.Info("walq: queue deleted", "queue", q.rt.name, "id", q.rt.id, "items", items, "forced", force)
	return nil
}

// QueueInfo describes one queue of a directory.
type QueueInfo struct {
	Name    string // "" for the default queue
	ID      uint64 // incarnation: 0 for the default queue, else the LSN of its creation
	Created time.Time
	// Paused says whether the queue delivers nothing now; PausedUntil is
	// when the pause ends, zero for a pause until Resume.
	Paused      bool
	PausedUntil time.Time
	// Options are the queue's settings in effect (Backoff aside).
	Options QueueOptions
	Stats   Stats
}

// queuesChunkHook, when set (by tests), runs before Queues takes the lock
// for each chunk of queues.
var queuesChunkHook func()

// Queues describes every queue of the directory, the default queue first,
// then in the order they were created. Each queue's Stats are as of its
// own Stats.LastLSN: the list is read a few hundred queues at a time, and
// records appended meanwhile show in the queues read after them.
func (q *Queue) Queues() ([]QueueInfo, error) {
	segs := q.log.Segments() // once: every queue shares the log
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	dir := q.dirStatsLocked(segs) // once: every queue shares them
	var rts []*queueRT
	for _, qs := range q.st.Queues() {
		rts = append(rts, q.rts[qs.ID()])
	}
	q.mu.Unlock()
	// The lock is taken for a few hundred queues at a time, not for the
	// whole list: with thousands of queues it would hold up every put.
	out := make([]QueueInfo, 0, len(rts))
	for len(rts) > 0 {
		chunk := rts[:min(len(rts), 256)]
		rts = rts[len(chunk):]
		if queuesChunkHook != nil {
			queuesChunkHook()
		}
		q.mu.Lock()
		// Records were applied while the lock was free: each queue's
		// figures are as of the LSN read with them.
		dir.LastLSN = q.st.LastLSN()
		for _, rt := range chunk {
			h := &Queue{directory: q.directory, rt: rt}
			if info, ok := h.infoLocked(dir); ok {
				out = append(out, info)
			}
		}
		q.mu.Unlock()
	}
	return out, nil
}

// infoLocked describes h's queue, dir holding the directory's figures;
// false when it was deleted meanwhile.
func (h *Queue) infoLocked(dir Stats) (QueueInfo, bool) {
	qs := h.st.Queue(h.rt.id)
	if qs == nil || h.rt.gone {
		return QueueInfo{}, false
	}
	st := dir
	h.queueStatsLocked(&st, false)
	s := h.rt.set
	info := QueueInfo{
		Name: h.rt.name, ID: h.rt.id,
		Options: QueueOptions{Visibility: s.visibility, MaxAttempts: s.maxAttempts, KeyWindow: s.keyWindow,
			MaxItems: s.maxItems, MaxBytes: s.maxBytes, MaxInFlight: s.maxInFlight},
		Stats: st,
	}
	if qs.Created() != 0 {
		info.Created = h.qt.toWall(qs.Created())
	}
	if u := qs.PausedUntil(); u != 0 {
		info.Paused = qs.Paused(h.qt.now())
		if u != math.MaxInt64 {
			info.PausedUntil = h.qt.toWall(u)
		}
	}
	return info, true
}

// RedriveTo sends dead letters of q to the queue target, a queue of the
// same directory (q itself is Redrive): each keeps its ID, body, key and
// delivery count, and waits ready with its attempts reset. Every ID must
// be a dead letter of q, or nothing is changed and the error is
// ErrNotFound. An item whose key is held in target (by a stored item, or
// within target's key window) is reported as ErrDuplicate, and one that
// would pass target's MaxItems or MaxBytes as ErrFull, in a *BatchError
// whose Errors[i] is that of ids[i]; those items stay where they were,
// and the others move, in one record.
func (q *Queue) RedriveTo(target *Queue, ids ...uint64) error {
	if target == nil || target.directory != q.directory {
		return fmt.Errorf("%w: RedriveTo a queue of another directory, or none", ErrInvalid)
	}
	if target.rt == q.rt {
		return q.Redrive(ids...)
	}
	if len(ids) == 0 {
		return nil
	}
	if err := checkIDs("redrive", ids); err != nil {
		return err
	}
	q.mu.Lock()
	if err := q.checkDeadLocked(ids); err != nil {
		return q.answerLocked(err)
	}
	if err := q.roomForIDsLocked("redrive", ids); err != nil {
		return q.answerLocked(err)
	}
	if err := target.callLocked(); err != nil {
		return q.answerLocked(fmt.Errorf("redrive into %s: %w", target.rt.label(), err))
	}
	now := q.qt.now()
	to := q.st.Queue(target.rt.id)
	var errs []error
	var moved []uint64
	var n int
	var bytes int64
	for i, id := range ids {
		it := q.st.Item(id)
		if it.Key() != "" {
			if holder, held := to.KeyHolder(it.Key(), now, int64(target.rt.set.keyWindow)); held {
				errs = setErr(errs, len(ids), i, fmt.Errorf("%w: item %d: key %q is held in %s by item %d", ErrDuplicate, id, it.Key(), target.rt.label(), holder))
				continue
			}
		}
		if err := target.rt.checkRoom(to, n+1, bytes+int64(it.Body.Len)); err != nil {
			errs = setErr(errs, len(ids), i, fmt.Errorf("item %d: %w", id, err))
			continue
		}
		n++
		bytes += int64(it.Body.Len)
		moved = append(moved, id)
	}
	var commit *wal.Commit
	if len(moved) > 0 {
		var err error
		if _, commit, err = q.appendToLocked(q.rt.id, &state.Move{Time: now, Target: target.rt.id, IDs: moved}); err != nil {
			q.mu.Unlock()
			return err
		}
	} else {
		commit = q.log.Barrier() // none moved: the keys and counts may rest on records not durable yet
	}
	q.mu.Unlock()
	if commit != nil {
		if err := q.wait(commit); err != nil {
			return err
		}
	}
	if errs != nil {
		return &BatchError{Errors: errs}
	}
	return nil
}
