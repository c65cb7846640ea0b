package walq

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// ActivityMinute is one minute of a queue's work as its log records it:
// the items put, the leases acked, and those that failed (nacks, expired
// leases and dead letters).
type ActivityMinute struct {
	Start              time.Time
	Put, Acked, Failed uint64
}

// Activity counts the queue's work per minute from since on, from the
// record times of the log it still holds (compaction drops the records a
// snapshot covers), oldest first; minutes with nothing are left out. It
// reads the log's files outside the queue's lock, read-only, as
// walq-inspect does, and verifies every frame it reads: a cost in
// proportion to the log, to pay once (a dashboard does when it starts),
// not on every page.
func (q *Queue) Activity(since time.Time) ([]ActivityMinute, error) {
	q.mu.Lock()
	if err := q.callLocked(); err != nil {
		return nil, q.answerLocked(err)
	}
	from := q.qt.fromWall(since)
	off := q.qt.offset()
	q.mu.Unlock()
	logDir := filepath.Join(q.dir, layout.LogDirName)
	byMinute := make(map[int64]*ActivityMinute)
	_, err := wal.Scan(logDir, 1, 0, func(pos wal.Position, rec wal.Record) error {
		if rec.Queue != q.rt.id {
			return nil
		}
		switch rec.Type {
		case state.TypePut, state.TypeAck, state.TypeNack, state.TypeExpire, state.TypeDeadLetter:
		default:
			return nil
		}
		r, err := state.DecodeAlias(rec.Type, rec.Body)
		if err != nil {
			return fmt.Errorf("activity: record %d in %s: %w", pos.Index, pos.File, err)
		}
		at := r.At()
		if at < from {
			return nil
		}
		wall := off.toWall(at).Truncate(time.Minute)
		m := byMinute[wall.UnixNano()]
		if m == nil {
			m = &ActivityMinute{Start: wall}
			byMinute[wall.UnixNano()] = m
		}
		switch p := r.(type) {
		case *state.Put:
			m.Put += uint64(len(p.Items))
		case *state.Ack:
			m.Acked++
		default: // a nack, an expiry or a dead letter
			m.Failed++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]ActivityMinute, 0, len(byMinute))
	for _, m := range byMinute {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b ActivityMinute) int { return a.Start.Compare(b.Start) })
	return out, nil
}
