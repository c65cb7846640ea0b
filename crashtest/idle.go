package crashtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/walq/walq"
)

// The idle check. An idle directory must not keep waking: the timer loop
// sleeps until the next lease end, due time, deadline, pause end or key
// release, and the committer until something is written or synced; Gets
// blocked with nothing to lease cost neither anything. walq counts both
// loops' rounds (Stats.Wakeups.TimerLoop and Committer), so after each
// check the parent copies the recovered directory, opens the copy under
// the cycle's sync policy and:
//
//   - empties it of what would come due (deletes the named queues, resumes
//     the default queue and deletes its items), keeping its log, snapshot
//     and keys;
//   - arranges queues whose consumers are blocked with nothing to do: the
//     default queue empty; a queue of items delayed by hours; a queue
//     paused until resumed that holds a ready item and one whose delay
//     ended during the pause (the timer once spun on such a queue); a
//     queue whose timed pause ended before the window (and once kept the
//     timer spinning after); and a queue at its MaxInFlight with a Get
//     blocked on a second handle that is then closed: the Get returns
//     ErrClosed and leaves no waiter, and an ack that frees the cap must
//     wake the Get waiting on the first handle (a closed handle's Get
//     once left a waiter that swallowed that wake-up);
//   - once what it arranged has come due and the committer has done its
//     last interval sync, reads DirStats, lets idleWindow pass with nothing
//     due in it (no lease ends, delays, deadlines or pause ends within
//     hours), and reads again: the timer loop may have woken at most
//     idleTimerSlack times (a key window that ended before the last record
//     is forgotten once, at a whole second), the committer not at all;
//     every Get is still blocked, and no queue reports Stats.Stalled.
//
// More is a busy-idle violation (or a stalled one), reported with the
// figures. The copy is removed after the check; the queue directory
// itself, which the ledger holds to, is not touched.
const (
	idleWindow     = 100 * time.Millisecond
	idleTimerSlack = 2
	// idleGetWait bounds how long a Get that has what it waits for may
	// take to return, and a Get started to be seen waiting.
	idleGetWait = time.Second
)

// idleRun is one idle check on an open copy.
type idleRun struct {
	q       *walq.Queue
	fail    func(format string, args ...any)
	gets    []*blockedGet
	watched []idleQueue
	handles []*walq.Queue // named handles to close
}

// idleQueue is a queue of the arrangement and the Gets that must stay
// blocked on it.
type idleQueue struct {
	name    string
	h       *walq.Queue
	waiting int
}

type blockedGet struct {
	queue    string
	done     chan getOutcome
	cancel   context.CancelFunc
	returned bool // its outcome was taken from done
}

// await returns what g returned, waiting up to d; false if it did not
// return by then.
func (g *blockedGet) await(d time.Duration) (getOutcome, bool) {
	if d <= 0 {
		select {
		case out := <-g.done:
			g.returned = true
			return out, true
		default:
			return getOutcome{}, false
		}
	}
	select {
	case out := <-g.done:
		g.returned = true
		return out, true
	case <-time.After(d):
		return getOutcome{}, false
	}
}

type getOutcome struct {
	m   walq.Message
	err error
}

// idleDue says whether the check at where is followed by an idle check:
// the first of the run, every Config.IdleEvery-th, and the last.
func (h *harness) idleDue(where string) bool {
	every := h.cfg.IdleEvery
	return every > 0 && (where == "after drain" || (h.sum.Checks-1)%every == 0)
}

// idleCheck runs the idle check on a copy of the recovered directory.
func (h *harness) idleCheck(where string) error {
	dir := filepath.Join(h.root, "idle")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := copyTree(h.queueDir, dir); err != nil {
		return fmt.Errorf("idle check: copy of the directory: %w", err)
	}
	defer os.RemoveAll(dir)
	h.sum.IdleChecks++
	r := &idleRun{fail: func(format string, args ...any) {
		h.led.violate("%s: idle check (sync %s): %s", where, h.sync, fmt.Sprintf(format, args...))
	}}
	q, err := walq.Open(dir, queueOptions(h.sync, h.cfg.SegmentSize))
	if err != nil {
		r.fail("open of the copy: %v", err)
		return nil
	}
	r.q = q
	defer r.close()
	if !r.empty() || !r.arrange() {
		return nil
	}
	// What was arranged to come due has (a delay of 5 ms, a pause of 20
	// ms); under SyncInterval, wait for the interval fsync that the last
	// write armed, seen in FsyncedLSN (a fixed wait of the interval and
	// 30 ms was not enough beside -race test runs: the fsync fell inside
	// the window).
	time.Sleep(50 * time.Millisecond)
	if h.syncEvery > 0 {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			st := q.DirStats()
			if st.FsyncedLSN >= st.LastLSN {
				break
			}
			if time.Now().After(deadline) {
				r.fail("the interval fsync never came: last LSN %d, fsynced %d after 10s", st.LastLSN, st.FsyncedLSN)
				return nil
			}
		}
	}
	timer, committer := r.window()
	h.sum.IdleTimerMax = max(h.sum.IdleTimerMax, timer)
	h.sum.IdleCommitterMax = max(h.sum.IdleCommitterMax, committer)
	return nil
}

// empty deletes the named queues, resumes the default queue and deletes
// its items.
func (r *idleRun) empty() bool {
	infos, err := r.q.Queues()
	if err != nil {
		r.fail("Queues: %v", err)
		return false
	}
	for _, info := range infos {
		if info.Name == "" {
			continue
		}
		var o walq.QueueOptions
		if i := queueIndex(info.Name); i >= 0 {
			o = namedQueueOptions(i)
		}
		hq, err := r.q.OpenQueue(info.Name, o)
		if err == nil {
			err = hq.Delete(true)
			hq.Close()
		}
		if err != nil {
			r.fail("delete of queue %s: %v", info.Name, err)
			return false
		}
	}
	if err := r.q.Resume(); err != nil {
		r.fail("resume of the default queue: %v", err)
		return false
	}
	for range 1000 {
		page, err := r.q.ListItems(walq.ListOptions{Limit: walq.MaxListLimit})
		if err != nil {
			r.fail("ListItems: %v", err)
			return false
		}
		if len(page.Items) == 0 {
			break
		}
		ids := make([]uint64, len(page.Items))
		for i, it := range page.Items {
			ids[i] = it.ID
		}
		// An item listed may be gone by the delete (its deadline passed
		// and the timer discarded it): DeleteItems then refuses the call
		// with ErrNoItem, changing nothing, and the next round lists
		// again.
		if err := r.q.DeleteItems(ids...); err != nil && !errors.Is(err, walq.ErrNoItem) {
			r.fail("DeleteItems: %v", err)
			return false
		}
	}
	if st := r.q.DirStats(); st.Items != 0 {
		r.fail("%d items left after every queue was emptied", st.Items)
		return false
	}
	return true
}

// arrange sets up the queues and their blocked Gets.
func (r *idleRun) arrange() bool {
	ctx := context.Background()
	ok := true
	must := func(what string, err error) {
		if err != nil && ok {
			r.fail("%s: %v", what, err)
			ok = false
		}
	}
	open := func(name string, o walq.QueueOptions) *walq.Queue {
		hq, err := r.q.OpenQueue(name, o)
		if err != nil {
			must("open queue "+name, err)
			return nil
		}
		r.handles = append(r.handles, hq)
		return hq
	}
	put := func(hq *walq.Queue, body string, opts ...walq.PutOption) {
		_, err := hq.Put(ctx, []byte(body), opts...)
		must("put "+body, err)
	}

	r.block(r.q, "(default)", 1)

	delayed := open("idle-delayed", walq.QueueOptions{})
	if delayed == nil {
		return false
	}
	put(delayed, "later", walq.WithDelay(time.Hour))
	put(delayed, "much-later", walq.WithDelay(2*time.Hour), walq.WithDeadline(time.Now().Add(3*time.Hour)))
	r.block(delayed, "idle-delayed", 2)

	paused := open("idle-paused", walq.QueueOptions{})
	if paused == nil {
		return false
	}
	must("pause idle-paused", paused.Pause(time.Time{}))
	put(paused, "due-while-paused", walq.WithDelay(5*time.Millisecond))
	put(paused, "ready-while-paused")
	r.block(paused, "idle-paused", 1)

	ended := open("idle-ended", walq.QueueOptions{})
	if ended == nil {
		return false
	}
	must("pause idle-ended", ended.Pause(time.Now().Add(20*time.Millisecond)))
	put(ended, "later", walq.WithDelay(time.Hour))
	r.block(ended, "idle-ended", 2)

	capped := walq.QueueOptions{Visibility: time.Hour, MaxInFlight: 1}
	first := open("idle-capped", capped)
	if first == nil || !ok {
		return false
	}
	put(first, "a")
	put(first, "b")
	m, leased, err := first.TryGet()
	if err != nil || !leased || string(m.Body) != "a" {
		r.fail("TryGet on idle-capped: %q, %v, %v; want a", m.Body, leased, err)
		return false
	}
	second, err := r.q.OpenQueue("idle-capped", capped)
	if err != nil {
		r.fail("second handle on idle-capped: %v", err)
		return false
	}
	gone := r.get(second, "idle-capped (second handle)")
	r.waitWaiting(first, "idle-capped", 1)
	second.Close()
	if out, ok := gone.await(idleGetWait); !ok {
		r.fail("a Get on a handle closed under it did not return in %v", idleGetWait)
	} else if !errors.Is(out.err, walq.ErrClosed) {
		r.fail("a Get on a handle closed under it returned %q, %v; want ErrClosed", out.m.Body, out.err)
	}
	if st := first.Stats(); st.Wakeups.Waiting != 0 {
		r.fail("the Get on a closed handle returned, and its queue still counts %d Gets waiting (none should)", st.Wakeups.Waiting)
	}
	waiting := first.Stats().Wakeups.Waiting
	next := r.get(first, "idle-capped")
	r.waitWaiting(first, "idle-capped", waiting+1)
	must("ack a on idle-capped", first.Ack(m.Receipt))
	if out, ok := next.await(idleGetWait); ok {
		if out.err != nil || string(out.m.Body) != "b" {
			r.fail("the Get on idle-capped woken by the ack that freed its cap returned %q, %v; want b", out.m.Body, out.err)
		}
	} else {
		st := first.Stats()
		r.fail("consumer stalled: a Get on idle-capped stayed blocked for %v after an ack freed its cap, with b to lease: "+
			"ready %d, leased %d (max in flight %d), Gets waiting %d, signalled and not back %d, delivered %d, Stats.Stalled %v",
			idleGetWait, st.Ready, st.Leased, st.MaxInFlight, st.Wakeups.Waiting, st.Wakeups.Woken, st.Delivered, st.Stalled())
		return false
	}
	r.block(first, "idle-capped", first.Stats().Wakeups.Waiting+1) // at its cap, b leased for an hour
	return ok
}

// get starts a Get on hq.
func (r *idleRun) get(hq *walq.Queue, name string) *blockedGet {
	ctx, cancel := context.WithCancel(context.Background())
	g := &blockedGet{queue: name, done: make(chan getOutcome, 1), cancel: cancel}
	go func() {
		m, err := hq.Get(ctx)
		g.done <- getOutcome{m, err}
	}()
	r.gets = append(r.gets, g)
	return g
}

// block starts Gets on hq until n wait on its queue, which must keep them
// waiting through the window.
func (r *idleRun) block(hq *walq.Queue, name string, n int) {
	for range n - hq.Stats().Wakeups.Waiting {
		r.get(hq, name)
	}
	r.waitWaiting(hq, name, n)
	r.watched = append(r.watched, idleQueue{name: name, h: hq, waiting: n})
}

// waitWaiting waits until n Gets wait on the queue of hq.
func (r *idleRun) waitWaiting(hq *walq.Queue, name string, n int) bool {
	deadline := time.Now().Add(idleGetWait)
	for {
		st := hq.Stats()
		if st.Wakeups.Waiting == n {
			return true
		}
		if time.Now().After(deadline) {
			r.fail("%d Gets wait on queue %s after %v, want %d (ready %d, delayed %d, leased %d, paused %v)",
				st.Wakeups.Waiting, name, idleGetWait, n, st.Ready, st.Delayed, st.Leased, st.Paused)
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// window reads the wake-up counters, lets idleWindow pass and reads them
// again; it returns the rounds of the timer loop and of the committer in
// between.
func (r *idleRun) window() (timer, committer uint64) {
	before := r.q.DirStats()
	firsts := make([]walq.Stats, len(r.watched))
	for i, w := range r.watched {
		firsts[i] = w.h.Stats()
	}
	time.Sleep(idleWindow)
	after := r.q.DirStats()
	timer = after.Wakeups.TimerLoop - before.Wakeups.TimerLoop
	committer = after.Wakeups.Committer - before.Wakeups.Committer
	if timer > idleTimerSlack || committer > 0 {
		r.fail("busy idle: in %v with nothing due and %d Gets blocked, the timer loop woke %d times (at most %d allowed) "+
			"and the committer %d (none allowed); last LSN %d then %d",
			idleWindow, before.Wakeups.Waiting, timer, idleTimerSlack, committer, before.LastLSN, after.LastLSN)
	}
	for i, w := range r.watched {
		for j, st := range []walq.Stats{firsts[i], w.h.Stats()} {
			if st.Stalled() || st.Wakeups.Waiting != w.waiting {
				r.fail("queue %s at the %s of the window: Stats.Stalled %v, Gets waiting %d (want %d), ready %d, delayed %d, leased %d, "+
					"signalled and not back %d, paused %v", w.name, []string{"start", "end"}[j], st.Stalled(), st.Wakeups.Waiting, w.waiting,
					st.Ready, st.Delayed, st.Leased, st.Wakeups.Woken, st.Paused)
			}
		}
	}
	for _, g := range r.gets {
		if g.returned {
			continue
		}
		if out, ok := g.await(0); ok {
			r.fail("a Get on queue %s returned with nothing due: %q, %v", g.queue, out.m.Body, out.err)
		}
	}
	return timer, committer
}

// close ends the Gets and closes the copy.
func (r *idleRun) close() {
	for _, g := range r.gets {
		g.cancel()
	}
	for _, g := range r.gets {
		if g.returned {
			continue
		}
		if _, ok := g.await(idleGetWait); !ok {
			r.fail("a Get on queue %s did not return in %v after its context ended", g.queue, idleGetWait)
		}
	}
	for _, hq := range r.handles {
		hq.Close()
	}
	if err := r.q.Close(); err != nil {
		r.fail("close of the copy: %v", err)
	}
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		if !d.Type().IsRegular() || strings.Contains(d.Name(), ".broken") {
			return nil // quarantined files: Open does not read them
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
