package walq

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/internal/rebuild"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// StoredItem is one item of a queue directory as ReadDir finds it on disk.
type StoredItem struct {
	Queue string // the queue's name ("" for the default queue)
	ID    uint64
	Body  []byte
	// BodyError says why Body is nil for a body that is stored but could
	// not be read or failed its check; "" otherwise.
	BodyError  string
	Priority   int
	Key        string
	EnqueuedAt time.Time
	// Due is when a waiting item is, or was, due; for an item leased when
	// the directory was last closed, when that lease began (a queue that
	// opens the directory ends such a lease and makes the item ready).
	Due      time.Time
	Deadline time.Time // zero: none
	// Leased: the item was leased when the directory was last closed.
	Leased bool
	// Dead: a dead letter, with LastError and DeadAt.
	Dead       bool
	Attempts   int // in the run since the put or the last redrive
	Deliveries int
	LastError  string
	DeadAt     time.Time
	History    []Attempt
}

// DirInfo says what ReadDir read.
type DirInfo struct {
	// ID is the directory's identity (from its format marker; zero for a
	// directory of format 1).
	ID [16]byte
	// LastLSN is the index of the last record read: a directory read
	// again with the same LastLSN holds the same items.
	LastLSN uint64
	// NextID is the ID the next put would get: every item's ID is below.
	NextID uint64
	// Queues are the names of the directory's queues, the default ("")
	// first.
	Queues []string
}

// ReadDir reads the queue directory dir as it is on disk and calls fn on
// each stored item (waiting, leased or dead), by queue and then by ID. It
// opens nothing for writing, takes no lock and changes nothing: it is for
// tools that copy a directory's items elsewhere, to be run when no queue
// holds the directory (a compaction running meanwhile may remove a file it
// reads, and it then fails). Times are translated to wall time as Open
// would translate them now. An error of fn stops it and is returned.
func ReadDir(dir string, fn func(StoredItem) error) (DirInfo, error) {
	fsys := wal.OSFS()
	files, err := layout.List(fsys, dir)
	if err != nil {
		return DirInfo{}, err
	}
	if !files.HasLog {
		return DirInfo{}, fmt.Errorf("walq: %s is not a queue directory (no log directory)", dir)
	}
	format, err := readFormat(fsys, dir, files)
	if err != nil {
		return DirInfo{}, err
	}
	base, err := rebuild.Newest(dir, format.id)
	if err != nil {
		return DirInfo{}, err
	}
	st := base.State
	if format.id.IsZero() {
		st.KeepBodies()
	}
	logDir := filepath.Join(dir, layout.LogDirName)
	if format.id.IsZero() {
		// A format-1 log, read as its format wrote it (read only: a torn
		// tail is left out, not cut).
		from := st.LastLSN() + 1
		var res wal.ScanResult
		res, err = wal.ScanFormat1(fsys, logDir, from, false, nil, func(pos wal.Position, rec wal.Record) error {
			return rebuild.Apply(st, logDir, pos, rec)
		})
		if err == nil && res.First > from && res.Last >= res.First {
			err = &CorruptionError{Dir: logDir, Index: from, Err: fmt.Errorf("format-1 log starts at %d but replay needs %d", res.First, from)}
		}
	} else {
		_, err = rebuild.Replay(st, logDir, 0, nil)
	}
	if err != nil {
		return DirInfo{}, fmt.Errorf("walq: read %s: replay the log: %w", dir, err)
	}
	info := DirInfo{ID: format.id, LastLSN: st.LastLSN(), NextID: st.NextID()}
	names := map[uint64]string{}
	for _, qs := range st.Queues() {
		names[qs.ID()] = qs.Name()
		info.Queues = append(info.Queues, qs.Name())
	}
	slices.Sort(info.Queues)
	var items []*state.Item
	st.Each(func(it *state.Item) { items = append(items, it) })
	slices.SortFunc(items, func(a, b *state.Item) int {
		if c := cmpString(names[a.Queue], names[b.Queue]); c != 0 {
			return c
		}
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	bodies := rebuild.NewBodies(dir)
	defer bodies.Close()
	// Queue time as Open would translate it: a queue opened now runs its
	// queue time from the later of the wall clock and the directory's
	// last record, so a wall clock behind that record counts from it.
	off := min(0, time.Now().UnixNano()-st.LastTime())
	wall := func(t int64) time.Time {
		if t == 0 {
			return time.Time{}
		}
		return time.Unix(0, t+off)
	}
	for _, it := range items {
		s := StoredItem{
			Queue:      names[it.Queue],
			ID:         it.ID,
			Priority:   int(it.Priority),
			Key:        it.Key(),
			EnqueuedAt: wall(it.EnqueuedAt),
			Due:        wall(it.Due),
			Deadline:   wall(it.Deadline()),
			Leased:     it.Status == state.Leased,
			Dead:       it.Status == state.Dead,
			Attempts:   int(it.Attempts),
			Deliveries: int(it.Deliveries),
			LastError:  it.LastError(),
			History:    attemptsOf(it.History(), 0),
		}
		if s.Dead {
			s.DeadAt = wall(it.EndedAt())
		}
		body, err := bodies.Body(st, it)
		if err != nil {
			s.BodyError = err.Error()
		} else {
			s.Body = body
		}
		if err := fn(s); err != nil {
			return info, err
		}
	}
	return info, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
