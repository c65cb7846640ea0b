package walq

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/walq/walq/internal/browse"
	"github.com/walq/walq/state"
)

// ErrNoItem is returned by Item, ItemBody and DeleteItems for an ID that
// names no item stored in the queue (DeleteItems then deletes nothing).
var ErrNoItem = errors.New("walq: no such item")

// ItemView is a stored item as a dashboard shows it: where it stands, its
// fields and its history, without its body (ItemBody reads that).
type ItemView struct {
	ID    uint64
	Queue string // the queue's name ("" for the default queue)
	// State is "ready", "delayed", "leased" or "dead". An item whose due
	// time has come is ready, whether or not a Get has looked at it yet.
	State      string
	Priority   int
	Key        string
	BodyLen    int
	Attempts   int // leases since the put or the last redrive
	Deliveries int // leases ever
	EnqueuedAt time.Time
	// Due is when a waiting item is (or was) due. LeaseStart and LeaseEnd
	// are a leased item's lease; Receipt its lease record's LSN.
	Due                  time.Time
	LeaseStart, LeaseEnd time.Time
	Receipt              uint64
	Deadline             time.Time // zero: none
	LastError            string
	EndedAt              time.Time // when its last lease ended (dead: when it died); zero if none did
	History              []Attempt // its last attempts that did not end in an ack, oldest first
}

// ItemFilter selects items: every field set must match. ID and Key name
// one item each, found at once; From and To bound the put time (From <=
// EnqueuedAt < To) and start and end a walk where those times lie.
// Text is a substring of the item's errors, or with InBody of its body
// too: bodies are read from disk, so a search in them looks at fewer
// items per call (see ListOptions.Budget).
type ItemFilter struct {
	State    string // "ready", "delayed", "leased", "dead", or "" for any
	ID       uint64
	Key      string
	From, To time.Time
	Text     string
	InBody   bool
}

// ListOptions asks ListItems for a page.
type ListOptions struct {
	Filter ItemFilter
	// After is the keyset cursor: only IDs above it (0: from the start).
	// Pass the previous page's Next to get the next one.
	After uint64
	// Limit is the most items returned [50, at most 1,000].
	Limit int
	// Budget is the most stored items looked at [DefaultListBudget; with
	// a body search DefaultBodyBudget]: a page whose filter matches few
	// items stops there and says where to go on.
	Budget int
	// BodyBytes is the most bytes of bodies a search in bodies reads
	// [DefaultBodyBytes]: the walk stops after the body that reaches it
	// (at least one body is read), and says where to go on.
	BodyBytes int64
}

// DefaultListBudget and DefaultBodyBudget bound the stored items one
// ListItems call looks at (every queue's items count: they share the ID
// order), without and with a search in bodies, and DefaultBodyBytes the
// bytes of the bodies it reads; MaxListLimit bounds a page.
const (
	DefaultListBudget = 100_000
	DefaultBodyBudget = 5_000
	DefaultBodyBytes  = 32 << 20
	MaxListLimit      = 1_000
	defaultListLimit  = 50
	// listStep is how many stored items a walk looks at under the lock
	// at a time: about a millisecond.
	listStep = 16_384
)

// ItemPage is one page of ListItems.
type ItemPage struct {
	Items []ItemView
	// Next is the cursor of the next page (ListOptions.After), 0 when the
	// walk reached the last item.
	Next uint64
	// Scanned counts the stored items the walk looked at, Searched the
	// bodies it read, and Stored the items of the whole directory when it
	// began: "searched 10,000 of 2,300,000".
	Scanned, Searched, Stored int
	// SearchedBytes is the bytes of the bodies it read.
	SearchedBytes int64
}

// BodyBytesBudget is o.BodyBytes, or DefaultBodyBytes when it is not set.
func (o ListOptions) BodyBytesBudget() int64 {
	if o.BodyBytes <= 0 {
		return DefaultBodyBytes
	}
	return o.BodyBytes
}

// ListItems returns the queue's items that match opts.Filter in ID order,
// from opts.After on. It looks at opts.Budget stored items at most, in
// steps that each hold the queue's lock for about a millisecond, so it
// never stalls the queue; a walk stopped by its budget returns the items
// it found with Next set. Items are as they stood when their step looked
// at them.
func (q *Queue) ListItems(opts ListOptions) (ItemPage, error) {
	f, err := q.filter(opts.Filter)
	if err != nil {
		return ItemPage{}, err
	}
	limit := opts.Limit
	switch {
	case limit <= 0:
		limit = defaultListLimit
	case limit > MaxListLimit:
		limit = MaxListLimit
	}
	budget := opts.Budget
	if budget <= 0 {
		budget = DefaultListBudget
		if f.InBody && f.Text != "" {
			budget = DefaultBodyBudget
		}
	}
	bodyBytes := opts.BodyBytesBudget()
	var page ItemPage
	after := opts.After
	for {
		var found []state.Item
		var srcs []bodySource
		step := min(listStep, budget-page.Scanned)
		q.mu.Lock()
		if err := q.callLocked(); err != nil {
			return ItemPage{}, q.answerLocked(err)
		}
		if page.Stored == 0 {
			page.Stored = q.st.TotalLen()
		}
		now := q.qt.now()
		off := q.qt.offset()
		if browse.None(q.st.Queue(q.rt.id), f, now) {
			q.mu.Unlock()
			return page, nil
		}
		q.bodies.drainLocked(q.st)
		w := browse.Each(q.st, q.rt.id, f, after, step, now, func(it *state.Item) bool {
			if f.Text != "" && !f.InBody && !browse.ErrorMatches(it, f.Text) {
				return true
			}
			found = append(found, it.Clone())
			if f.Text != "" && f.InBody {
				srcs = append(srcs, q.sourceLocked(it.ID, it.Body, false))
			}
			return len(page.Items)+len(found) < limit
		})
		q.mu.Unlock()
		page.Scanned += w.Scanned
		for i := range found {
			it := &found[i]
			if f.Text != "" && f.InBody && !browse.ErrorMatches(it, f.Text) {
				if page.Searched > 0 && page.SearchedBytes >= bodyBytes {
					// Out of bytes: the next page starts at this item.
					if i > 0 {
						page.Next = found[i-1].ID
					} else {
						page.Next = after
					}
					return page, nil
				}
				page.Searched++
				page.SearchedBytes += int64(it.Body.Len)
				body, err := q.loadBody(srcs[i])
				if err != nil || !containsBytes(body, f.Text) {
					continue
				}
			}
			page.Items = append(page.Items, q.view(it, now, off))
		}
		page.Next = w.Next
		if w.Next == 0 || len(page.Items) >= limit || page.Scanned >= budget || f.Exact() {
			if f.Exact() {
				page.Next = 0
			}
			return page, nil
		}
		after = w.Next
	}
}

func containsBytes(body []byte, text string) bool {
	return bytes.Contains(body, []byte(text))
}

// filter checks an ItemFilter and translates it into queue time.
func (q *Queue) filter(in ItemFilter) (browse.Filter, error) {
	if !browse.ValidState(in.State) {
		return browse.Filter{}, fmt.Errorf("%w: item state %q: want ready, delayed, leased, dead or none", ErrInvalid, in.State)
	}
	if !in.From.IsZero() && !in.To.IsZero() && !in.From.Before(in.To) {
		return browse.Filter{}, fmt.Errorf("%w: put time from %v to %v: an empty range", ErrInvalid,
			in.From.UTC().Format(time.RFC3339Nano), in.To.UTC().Format(time.RFC3339Nano))
	}
	f := browse.Filter{State: in.State, ID: in.ID, Key: in.Key, Text: in.Text, InBody: in.InBody}
	if !in.From.IsZero() {
		f.From = max(q.qt.fromWall(in.From), 1)
	}
	if !in.To.IsZero() {
		f.To = max(q.qt.fromWall(in.To), 1)
	}
	return f, nil
}

// view describes it at now.
func (q *Queue) view(it *state.Item, now int64, off offset) ItemView {
	v := ItemView{
		ID: it.ID, Queue: q.rt.name, State: browse.StateOf(it, now),
		Priority: int(it.Priority), Key: it.Key(), BodyLen: int(it.Body.Len),
		Attempts: int(it.Attempts), Deliveries: int(it.Deliveries),
		EnqueuedAt: off.toWall(it.EnqueuedAt), LastError: it.LastError(),
		History: attemptsOf(it.History(), off),
	}
	switch it.Status {
	case state.Waiting:
		v.Due = off.toWall(it.Due)
	case state.Leased:
		v.LeaseStart, v.LeaseEnd, v.Receipt = off.toWall(it.Due), off.toWall(it.LeaseEnd), it.Receipt
	}
	if d := it.Deadline(); d != 0 {
		v.Deadline = off.toWall(d)
	}
	if e := it.EndedAt(); e != 0 {
		v.EndedAt = off.toWall(e)
	}
	return v
}

// Item describes the queue's stored item id, or returns ErrNoItem.
func (q *Queue) Item(id uint64) (ItemView, error) {
	q.mu.Lock()
	if err := q.callLocked(); err != nil {
		return ItemView{}, q.answerLocked(err)
	}
	it := q.st.Item(id)
	if it == nil || it.Queue != q.rt.id {
		// Gone by an ack, say, that a crash can still take back.
		return ItemView{}, q.answerLocked(fmt.Errorf("%w: item %d in %s", ErrNoItem, id, q.rt.label()))
	}
	v := q.view(it, q.qt.now(), q.qt.offset())
	q.mu.Unlock()
	return v, nil
}

// ItemBody returns a copy of the body of the queue's stored item id, read
// from disk when memory does not hold it. It returns ErrNoItem for an ID
// not stored in the queue, and an error naming the item for a body that
// cannot be read or fails its check.
func (q *Queue) ItemBody(id uint64) ([]byte, error) {
	q.mu.Lock()
	if err := q.callLocked(); err != nil {
		return nil, q.answerLocked(err)
	}
	it := q.st.Item(id)
	if it == nil || it.Queue != q.rt.id {
		return nil, q.answerLocked(fmt.Errorf("%w: item %d in %s", ErrNoItem, id, q.rt.label()))
	}
	q.bodies.drainLocked(q.st)
	src := q.sourceLocked(it.ID, it.Body, false)
	q.mu.Unlock()
	return q.loadBody(src)
}

// MaxHead is the most items Head returns.
const MaxHead = 1_000

// Head returns the first n ready items of the queue (at most MaxHead) in
// the order deliveries would take them, paused or not. The state keeps
// ready items in heaps that show only their first, so Head walks the
// items in ID order, in steps that each hold the lock for about a
// millisecond, and stops as soon as no later item can come before those
// it holds (see internal/browse's Head.Walk): soon after n items on a
// queue of one priority; with several, it may look at every item. An item
// that changes during the walk is shown as the step that looked at it
// found it.
func (q *Queue) Head(n int) ([]ItemView, error) {
	n = min(max(n, 0), MaxHead)
	sel := browse.NewHead(n)
	var after uint64
	var now int64
	var off offset
	for {
		q.mu.Lock()
		if err := q.callLocked(); err != nil {
			return nil, q.answerLocked(err)
		}
		now = q.qt.now()
		off = q.qt.offset()
		qs := q.st.Queue(q.rt.id)
		qs.Promote(now) // what a Get would do: due items join the ready heaps
		first := qs.NextReady()
		if first == nil {
			q.mu.Unlock()
			break
		}
		w, done := sel.Walk(q.st, q.rt.id, after, listStep, now, first.Priority, qs.Gauges().Ready)
		q.mu.Unlock()
		if done {
			break
		}
		after = w.Next
	}
	items := sel.Items()
	out := make([]ItemView, len(items))
	for i := range items {
		out[i] = q.view(&items[i], now, off)
	}
	return out, nil
}

// Logger is the logger the queue logs to (Options.Logger): tools acting on
// the queue, a dashboard say, log their actions there too.
func (q *Queue) Logger() *slog.Logger { return q.opts.Logger }

// StatsNow is Stats. (It once promoted due items before counting, when
// Stats counted an item delayed until a consumer looked; Stats now counts
// every item whose due time has come as ready.)
func (q *Queue) StatsNow() Stats { return q.Stats() }
