package web

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/walq/walq"
)

// Source is what the dashboard shows: a set of queues, their items and
// their bodies. Queues adapts a service's open queues; walq-inspect serve
// has one that reads a directory. Every call must be cheap on a large
// queue: counts come from counters, lists from bounded walks.
type Source interface {
	// Queues summarizes every queue, in the order the overview lists them.
	Queues() ([]QueueSummary, error)
	// Queue summarizes one queue (the default queue is ""), or returns an
	// error wrapping ErrUnknownQueue.
	Queue(name string) (QueueSummary, error)
	// ListItems, Head, Item and ItemBody are those of walq.Queue, on the
	// queue named (the default queue is "").
	ListItems(queue string, opts walq.ListOptions) (walq.ItemPage, error)
	Head(queue string, n int) ([]walq.ItemView, error)
	Item(queue string, id uint64) (walq.ItemView, error)
	ItemBody(queue string, id uint64) ([]byte, error)
}

// Actor is a Source whose queues can be changed: the dashboard offers its
// actions only on one (and only to requests Options.Access or
// Options.Allow allows).
type Actor interface {
	Source
	Redrive(queue string, ids ...uint64) error
	Purge(queue string, ids ...uint64) error
	// Delete deletes stored items in any state (walq.Queue.DeleteItems).
	Delete(queue string, ids ...uint64) error
	// Pause pauses the queue until the wall-clock time until (zero: until
	// Resume).
	Pause(queue string, until time.Time) error
	Resume(queue string) error
	// Logger is where the queue's actions are logged.
	Logger(queue string) *slog.Logger
}

// Minute is one minute of a queue's activity.
type Minute struct {
	Start              time.Time
	Put, Acked, Failed uint64 // Failed: nacks, expired leases and dead letters
}

// Historian is a Source that knows the activity of its queues from the
// record times in their logs: Queues reads a queue's log once, in the
// background, when its chart is first drawn; walq-inspect serve counts the
// records as it replays them. The charts take the minutes before upTo from
// it, and the later ones from the counters the dashboard samples while it
// runs.
type Historian interface {
	// History returns the queue's activity per minute from since on,
	// oldest first, for the minutes its log still holds, and the time up
	// to which they are complete (the zero Time: none yet).
	History(queue string, since time.Time) (minutes []Minute, upTo time.Time, err error)
}

// QueueSummary is one row of the overview.
type QueueSummary struct {
	Name  string // "" for the default queue
	Stats walq.Stats
	// Paused says whether the queue delivers nothing now, PausedUntil
	// when its pause ends (zero: until resumed).
	Paused      bool
	PausedUntil time.Time
}

// ErrUnknownQueue is returned for a queue name the source does not have.
var ErrUnknownQueue = errors.New("web: no such queue")

// Queues is the Source (and Actor) of a service's open queues: handles of
// one or more directories, the default queue's or named ones. Each name
// must be given once.
func Queues(queues ...*walq.Queue) (Actor, error) {
	s := &liveSource{byName: make(map[string]*walq.Queue), history: make(map[string]*logHistory)}
	for _, q := range queues {
		if q == nil {
			return nil, fmt.Errorf("web: a nil queue")
		}
		if _, dup := s.byName[q.Name()]; dup {
			return nil, fmt.Errorf("web: queue %q given twice (the dashboard names queues by name)", q.Name())
		}
		s.byName[q.Name()] = q
		s.history[q.Name()] = &logHistory{done: make(chan struct{})}
		s.order = append(s.order, q)
	}
	return s, nil
}

type liveSource struct {
	order   []*walq.Queue
	byName  map[string]*walq.Queue
	history map[string]*logHistory
}

// logHistory is a queue's activity as its log held it when the dashboard
// first drew its chart.
type logHistory struct {
	once    sync.Once
	done    chan struct{} // closed once the log was read
	minutes []Minute
	upTo    time.Time
	err     error
}

// History reads the queue's log once, in the background (Queue.Activity),
// and returns nothing until that is done.
func (s *liveSource) History(queue string, since time.Time) ([]Minute, time.Time, error) {
	q, err := s.queue(queue)
	if err != nil {
		return nil, time.Time{}, err
	}
	lh := s.history[queue]
	lh.once.Do(func() {
		go func() {
			defer close(lh.done)
			lh.upTo = time.Now()
			ms, err := q.Activity(since)
			for _, m := range ms {
				lh.minutes = append(lh.minutes, Minute{Start: m.Start, Put: m.Put, Acked: m.Acked, Failed: m.Failed})
			}
			lh.err = err
		}()
	})
	select {
	case <-lh.done:
	default:
		return nil, time.Time{}, nil
	}
	var out []Minute
	for _, m := range lh.minutes {
		if !m.Start.Before(since.Truncate(time.Minute)) {
			out = append(out, m)
		}
	}
	return out, lh.upTo, lh.err
}

func (s *liveSource) queue(name string) (*walq.Queue, error) {
	q, ok := s.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownQueue, name)
	}
	return q, nil
}

func (s *liveSource) Queues() ([]QueueSummary, error) {
	out := make([]QueueSummary, 0, len(s.order))
	for _, q := range s.order {
		sum, err := summarize(q)
		if err != nil {
			return nil, err
		}
		out = append(out, sum)
	}
	return out, nil
}

func (s *liveSource) Queue(name string) (QueueSummary, error) {
	q, err := s.queue(name)
	if err != nil {
		return QueueSummary{}, err
	}
	return summarize(q)
}

func summarize(q *walq.Queue) (QueueSummary, error) {
	st := q.Stats()
	sum := QueueSummary{Name: q.Name(), Stats: st, Paused: st.Paused}
	if st.Paused {
		info, err := pauseInfo(q)
		if err != nil {
			return QueueSummary{}, err
		}
		sum.PausedUntil = info.PausedUntil
	}
	return sum, nil
}

// pauseInfo finds q in the list of its directory's queues, for the end of
// its pause.
func pauseInfo(q *walq.Queue) (walq.QueueInfo, error) {
	infos, err := q.Queues()
	if err != nil {
		return walq.QueueInfo{}, err
	}
	for _, info := range infos {
		if info.Name == q.Name() {
			return info, nil
		}
	}
	return walq.QueueInfo{}, fmt.Errorf("%w: %q (deleted)", ErrUnknownQueue, q.Name())
}

func (s *liveSource) ListItems(queue string, opts walq.ListOptions) (walq.ItemPage, error) {
	q, err := s.queue(queue)
	if err != nil {
		return walq.ItemPage{}, err
	}
	return q.ListItems(opts)
}

func (s *liveSource) Head(queue string, n int) ([]walq.ItemView, error) {
	q, err := s.queue(queue)
	if err != nil {
		return nil, err
	}
	return q.Head(n)
}

func (s *liveSource) Item(queue string, id uint64) (walq.ItemView, error) {
	q, err := s.queue(queue)
	if err != nil {
		return walq.ItemView{}, err
	}
	return q.Item(id)
}

func (s *liveSource) ItemBody(queue string, id uint64) ([]byte, error) {
	q, err := s.queue(queue)
	if err != nil {
		return nil, err
	}
	return q.ItemBody(id)
}

func (s *liveSource) Redrive(queue string, ids ...uint64) error {
	q, err := s.queue(queue)
	if err != nil {
		return err
	}
	return q.Redrive(ids...)
}

func (s *liveSource) Purge(queue string, ids ...uint64) error {
	q, err := s.queue(queue)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: purge of no item (the dashboard names what it purges)", walq.ErrInvalid)
	}
	return q.PurgeDeadLetters(ids...)
}

func (s *liveSource) Delete(queue string, ids ...uint64) error {
	q, err := s.queue(queue)
	if err != nil {
		return err
	}
	return q.DeleteItems(ids...)
}

func (s *liveSource) Pause(queue string, until time.Time) error {
	q, err := s.queue(queue)
	if err != nil {
		return err
	}
	return q.Pause(until)
}

func (s *liveSource) Resume(queue string) error {
	q, err := s.queue(queue)
	if err != nil {
		return err
	}
	return q.Resume()
}

func (s *liveSource) Logger(queue string) *slog.Logger {
	if q, err := s.queue(queue); err == nil {
		return q.Logger()
	}
	return slog.New(slog.DiscardHandler)
}
