package main

import (
	"bytes"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/walq/walq"
	"github.com/walq/walq/internal/browse"
	"github.com/walq/walq/state"
	"github.com/walq/walq/web"
)

// dirSource is the dashboard's Source over a queue directory: a state
// rebuilt from the directory's snapshot and log, read-only, and brought up
// to date by replaying the records appended since (refresh). Record times
// are wall-clock times, so the state's times are shown as they are.
type dirSource struct {
	qf *queueFiles

	mu       sync.Mutex
	r        *replayer
	st       *state.State
	loadedAt time.Time
	loadErr  error // of the last refresh; the state before it is still shown
	minutes  map[string]map[int64]*web.Minute
	newest   int64 // the newest record time seen
}

// newDirSource rebuilds the state of the directory qf describes.
func newDirSource(qf *queueFiles) (*dirSource, error) {
	s := &dirSource{qf: qf, minutes: make(map[string]map[int64]*web.Minute)}
	s.r = newReplayer(qf, 1, 0, s.count)
	if err := s.refresh(); err != nil {
		return nil, err
	}
	return s, nil
}

// refresh replays the records appended since the last refresh (or, when a
// compaction removed records not read yet, rebuilds from the newest
// snapshot).
func (s *dirSource) refresh() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.r.run()
	if err == nil {
		var st *state.State
		if st, err = s.r.state(); err == nil {
			s.st = st
			s.loadedAt = time.Now()
		}
	}
	s.loadErr = err
	return err
}

// count adds a record to the minutes of its queue.
func (s *dirSource) count(ev *event) error {
	if ev.Rec == nil || !ev.QueueKnown {
		return nil
	}
	at := ev.Rec.At()
	s.newest = max(s.newest, at)
	var put, acked, failed uint64
	switch r := ev.Rec.(type) {
	case *state.Put:
		put = uint64(len(r.Items))
	case *state.Ack:
		acked = 1
	case *state.End:
		failed = 1
	default:
		return nil
	}
	minute := at / int64(time.Minute)
	byMin := s.minutes[ev.QueueName]
	if byMin == nil {
		byMin = make(map[int64]*web.Minute)
		s.minutes[ev.QueueName] = byMin
	}
	m := byMin[minute]
	if m == nil {
		m = &web.Minute{Start: time.Unix(0, minute*int64(time.Minute))}
		byMin[minute] = m
		s.prune()
	}
	m.Put += put
	m.Acked += acked
	m.Failed += failed
	return nil
}

// keepMinutes is how far behind the newest record the minutes are kept.
const keepMinutes = 2 * 60

func (s *dirSource) prune() {
	oldest := s.newest/int64(time.Minute) - keepMinutes
	for _, byMin := range s.minutes {
		for m := range byMin {
			if m < oldest {
				delete(byMin, m)
			}
		}
	}
}

// History gives the minutes of the queue's records from since on, complete
// up to the last refresh.
func (s *dirSource) History(queue string, since time.Time) ([]web.Minute, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []web.Minute
	for _, m := range s.minutes[queue] {
		if !m.Start.Before(since.Truncate(time.Minute)) {
			out = append(out, *m)
		}
	}
	return out, s.loadedAt, nil
}

// queueLocked finds a queue by its dashboard name ("" for the default).
func (s *dirSource) queueLocked(name string) (*state.QueueState, error) {
	if s.st == nil {
		return nil, s.loadErr
	}
	if name == "" {
		return s.st.Default(), nil
	}
	if q := s.st.QueueByName(name); q != nil {
		return q, nil
	}
	return nil, fmt.Errorf("%w: %q", web.ErrUnknownQueue, name)
}

func (s *dirSource) Queues() ([]web.QueueSummary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == nil {
		return nil, s.loadErr
	}
	var out []web.QueueSummary
	for _, q := range s.st.Queues() {
		out = append(out, s.summaryLocked(q))
	}
	return out, nil
}

func (s *dirSource) Queue(name string) (web.QueueSummary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueLocked(name)
	if err != nil {
		return web.QueueSummary{}, err
	}
	return s.summaryLocked(q), nil
}

// summaryLocked describes q now. It promotes the items whose due time has
// come, as a Get would: the state is this process's own copy.
func (s *dirSource) summaryLocked(q *state.QueueState) web.QueueSummary {
	now := queueNow(s.st)
	q.Promote(now)
	g := q.Gauges()
	c := q.Counters()
	set := q.Settings()
	st := walq.Stats{
		Queue: q.Name(), Paused: q.Paused(now), MaxInFlight: int(set.MaxInFlight),
		Ready: g.Ready, Delayed: g.Delayed, Leased: g.Leased, Dead: g.Dead, Items: g.Items, Bytes: g.Bytes, Keys: g.Keys,
		Put: c.Put, Delivered: c.Delivered, Acked: c.Acked, Nacked: c.Nacked, Expired: c.Expired,
		DeadLettered: c.DeadLettered, Discarded: c.Discarded, Redriven: c.Redriven, Purged: c.Purged,
		MovedIn: c.MovedIn, MovedOut: c.MovedOut, LastLSN: s.st.LastLSN(),
	}
	if g.OldestReadyDue != 0 && g.OldestReadyDue < now {
		st.OldestReady = time.Duration(now - g.OldestReadyDue)
	}
	sum := web.QueueSummary{Name: q.Name(), Stats: st, Paused: st.Paused}
	if u := q.PausedUntil(); st.Paused && u != math.MaxInt64 {
		sum.PausedUntil = time.Unix(0, u)
	}
	return sum
}

// view describes an item of queue name at now.
func view(it *state.Item, name string, now int64) walq.ItemView {
	at := func(t int64) time.Time {
		if t == 0 {
			return time.Time{}
		}
		return time.Unix(0, t)
	}
	v := walq.ItemView{
		ID: it.ID, Queue: name, State: browse.StateOf(it, now), Priority: int(it.Priority), Key: it.Key(),
		BodyLen: int(it.Body.Len), Attempts: int(it.Attempts), Deliveries: int(it.Deliveries),
		EnqueuedAt: at(it.EnqueuedAt), Deadline: at(it.Deadline()), LastError: it.LastError(), EndedAt: at(it.EndedAt()),
	}
	switch it.Status {
	case state.Waiting:
		v.Due = at(it.Due)
	case state.Leased:
		v.LeaseStart, v.LeaseEnd, v.Receipt = at(it.Due), at(it.LeaseEnd), it.Receipt
	}
	for _, a := range it.History() {
		v.History = append(v.History, walq.Attempt{Start: at(a.Start), End: at(a.End), How: state.TypeName(a.How), Error: a.Error})
	}
	return v
}

// ListItems is walq.Queue.ListItems over the rebuilt state. A walk that
// reads no body holds the lock throughout (it only looks at the state); a
// search in bodies takes steps under the lock and reads the bodies outside
// it, within opts' bytes of bodies, so a long search holds up neither the
// refresh nor the other pages.
func (s *dirSource) ListItems(queue string, opts walq.ListOptions) (walq.ItemPage, error) {
	in := opts.Filter
	if !browse.ValidState(in.State) {
		return walq.ItemPage{}, fmt.Errorf("%w: item state %q", walq.ErrInvalid, in.State)
	}
	f := browse.Filter{State: in.State, ID: in.ID, Key: in.Key, Text: in.Text, InBody: in.InBody}
	if !in.From.IsZero() {
		f.From = max(unixNanos(in.From), 1)
	}
	if !in.To.IsZero() {
		f.To = max(unixNanos(in.To), 1)
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, walq.MaxListLimit)
	search := f.InBody && f.Text != ""
	budget := opts.Budget
	if budget <= 0 {
		budget = walq.DefaultListBudget
		if search {
			budget = walq.DefaultBodyBudget
		}
	}
	if !search {
		s.mu.Lock()
		defer s.mu.Unlock()
		q, err := s.queueLocked(queue)
		if err != nil {
			return walq.ItemPage{}, err
		}
		now := queueNow(s.st)
		page := walq.ItemPage{Stored: s.st.TotalLen()}
		if browse.None(q, f, now) {
			return page, nil
		}
		w := browse.Each(s.st, q.ID(), f, opts.After, budget, now, func(it *state.Item) bool {
			if f.Text != "" && !browse.ErrorMatches(it, f.Text) {
				return true
			}
			page.Items = append(page.Items, view(it, queue, now))
			return len(page.Items) < limit
		})
		page.Next, page.Scanned = w.Next, w.Scanned
		return page, nil
	}
	bodyBytes := opts.BodyBytesBudget()
	var page walq.ItemPage
	after := opts.After
	for {
		var found []candidate
		s.mu.Lock()
		q, err := s.queueLocked(queue)
		if err != nil {
			s.mu.Unlock()
			return walq.ItemPage{}, err
		}
		now := queueNow(s.st)
		if page.Stored == 0 {
			page.Stored = s.st.TotalLen()
		}
		if browse.None(q, f, now) {
			s.mu.Unlock()
			return page, nil
		}
		step := min(searchStep, budget-page.Scanned)
		w := browse.Each(s.st, q.ID(), f, after, step, now, func(it *state.Item) bool {
			c := candidate{view: view(it, queue, now)}
			if !browse.ErrorMatches(it, f.Text) {
				c.item = it.Clone()
				c.read = true
				if it.Body.LSN == 0 {
					if b, ok := s.st.Inline(it.ID); ok {
						c.inline = append([]byte{}, b...)
					}
				}
			}
			found = append(found, c)
			return len(page.Items)+len(found) < limit
		})
		dir := s.qf.Dir
		s.mu.Unlock()
		page.Scanned += w.Scanned
		for i := range found {
			c := &found[i]
			if c.read {
				if page.Searched > 0 && page.SearchedBytes >= bodyBytes {
					// Out of bytes: the next page starts at this item.
					page.Next = after
					if i > 0 {
						page.Next = found[i-1].view.ID
					}
					return page, nil
				}
				page.Searched++
				page.SearchedBytes += int64(c.item.Body.Len)
				body, err := c.body(dir)
				if err != nil || !bytes.Contains(body, []byte(f.Text)) {
					continue
				}
			}
			page.Items = append(page.Items, c.view)
		}
		page.Next = w.Next
		if f.Exact() {
			page.Next = 0
		}
		if page.Next == 0 || len(page.Items) >= limit || page.Scanned >= budget {
			return page, nil
		}
		after = w.Next
	}
}

// searchStep is how many stored items a search in bodies looks at under
// the lock at a time.
const searchStep = 16_384

// searchRead, when set (by a test), runs before a search reads a body.
var searchRead func()

// candidate is an item a search in bodies looked at: its view, and when
// its errors do not match, what it needs to read its body outside the
// lock (a copy of the item, and an inline body taken from the state).
type candidate struct {
	view   walq.ItemView
	read   bool
	item   state.Item
	inline []byte
}

// body reads the candidate's body: an inline one was copied under the
// lock; one in the log is read from its segment (a compaction since may
// have removed it: an error, so no match).
func (c *candidate) body(dir string) ([]byte, error) {
	if searchRead != nil {
		searchRead()
	}
	if c.item.Body.LSN == 0 {
		if c.item.Body.Len > 0 && c.inline == nil {
			return nil, fmt.Errorf("item %d: its body is neither in the log nor in the state", c.item.ID)
		}
		return c.inline, nil
	}
	return storedBody(dir, nil, &c.item)
}

func (s *dirSource) Head(queue string, n int) ([]walq.ItemView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueLocked(queue)
	if err != nil {
		return nil, err
	}
	now := queueNow(s.st)
	sel := browse.NewHead(min(max(n, 0), walq.MaxHead))
	q.Promote(now)
	if first := q.NextReady(); first != nil {
		sel.Walk(s.st, q.ID(), 0, math.MaxInt, now, first.Priority, q.Gauges().Ready)
	}
	items := sel.Items()
	out := make([]walq.ItemView, len(items))
	for i := range items {
		out[i] = view(&items[i], queue, now)
	}
	return out, nil
}

// itemLocked finds a stored item of the queue.
func (s *dirSource) itemLocked(queue string, id uint64) (*state.Item, error) {
	q, err := s.queueLocked(queue)
	if err != nil {
		return nil, err
	}
	it := s.st.Item(id)
	if it == nil || it.Queue != q.ID() {
		return nil, fmt.Errorf("%w: item %d", walq.ErrNoItem, id)
	}
	return it, nil
}

func (s *dirSource) Item(queue string, id uint64) (walq.ItemView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, err := s.itemLocked(queue, id)
	if err != nil {
		return walq.ItemView{}, err
	}
	return view(it, queue, queueNow(s.st)), nil
}

func (s *dirSource) ItemBody(queue string, id uint64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, err := s.itemLocked(queue, id)
	if err != nil {
		return nil, err
	}
	return storedBody(s.qf.Dir, s.st, it)
}
