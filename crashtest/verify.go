package crashtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/internal/rebuild"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// dirState is what verifyDir rebuilt from a closed queue directory.
type dirState struct {
	st          *state.State
	snapshotLSN uint64
	first, last uint64 // the log's index range
	segments    int
	// at holds, for each LSN asked for, each queue's gauges and counters
	// when replay passed it (none if it never did).
	at map[uint64]map[uint64]queueFigures
}

// queueFigures are one queue's gauges and counters at one LSN.
type queueFigures struct {
	gauges   state.Gauges
	counters state.Counters
}

func (ds *dirState) capture(lsn uint64) {
	if m, ok := ds.at[lsn]; ok && m == nil {
		m = make(map[uint64]queueFigures)
		for _, qs := range ds.st.Queues() {
			m[qs.ID()] = queueFigures{qs.Gauges(), qs.Counters()}
		}
		ds.at[lsn] = m
	}
}

// verifyDir does what walq-inspect verify does, read-only, on a queue
// directory that no process has open: every snapshot decodes and covers
// the LSN its name says; every record of the log verifies (framing, CRC,
// consecutive LSNs, no torn tail: a queue that was closed cleanly has
// none); the newest snapshot plus the log after it replays without a
// refused record; and the state it gives is self-consistent.
//
// It also captures the gauges and counters each queue had at each LSN of
// at, to be compared with what the queues reported then.
func verifyDir(dir string, at ...uint64) (*dirState, error) {
	snaps, err := wal.ListSnapshots(dir)
	if err != nil {
		return nil, err
	}
	id, err := readDirID(dir)
	if err != nil {
		return nil, err
	}
	ds := &dirState{st: state.New(), at: make(map[uint64]map[uint64]queueFigures)}
	for _, lsn := range at {
		ds.at[lsn] = nil
	}
	for i, s := range snaps {
		st, err := rebuild.ReadSnapshot(dir, s, id)
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", s.Name, err)
		}
		if i == 0 {
			ds.st, ds.snapshotLSN = st, s.LSN
			ds.capture(s.LSN)
		}
	}
	logDir := filepath.Join(dir, layout.LogDirName)
	segs, others, err := wal.ListSegments(logDir)
	if err != nil {
		return nil, err
	}
	for _, s := range segs {
		if s.Leftover {
			return nil, fmt.Errorf("leftover %s of an interrupted truncation after a clean close", s.Name)
		}
	}
	for _, name := range others {
		if layout.ClassifyLog(name) != layout.Broken {
			return nil, fmt.Errorf("unexpected file %s in the log directory", name)
		}
	}
	ds.segments = len(segs)
	whole, err := wal.Scan(logDir, 0, 0, nil)
	if err != nil {
		return nil, fmt.Errorf("verify log: %w", err)
	}
	if whole.Tail != nil {
		return nil, fmt.Errorf("verify log: torn tail after a clean close: %+v", *whole.Tail)
	}
	ds.first, ds.last = whole.First, whole.Last
	ds.capture(0)
	if len(segs) > 0 && (ds.snapshotLSN+1 < whole.First || ds.snapshotLSN > whole.Last) {
		return nil, fmt.Errorf("verify log: snapshot covers %d, log holds %d..%d", ds.snapshotLSN, whole.First, whole.Last)
	}
	_, err = rebuild.Replay(ds.st, logDir, 0, func(lsn uint64) error {
		ds.capture(lsn)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(segs) > 0 && ds.st.LastLSN() != whole.Last {
		return nil, fmt.Errorf("replay ended at %d, log at %d", ds.st.LastLSN(), whole.Last)
	}
	return ds, checkState(ds.st)
}

// readDirID reads the directory ID from the queue directory's format
// marker (every snapshot and segment must carry it).
func readDirID(dir string) (wal.DirID, error) {
	data, err := os.ReadFile(filepath.Join(dir, layout.MarkerName))
	if err != nil {
		return wal.DirID{}, fmt.Errorf("format marker: %w", err)
	}
	id, err := wal.DecodeMarker(data)
	if err != nil {
		return wal.DirID{}, fmt.Errorf("format marker: %w", err)
	}
	return id, nil
}

// checkState checks what must hold of any state: each stored item in
// exactly one place of a queue that exists, each queue's gauges adding up,
// its keys held by its items, and its items conserved (every item put or
// moved in is stored, acked, discarded, purged or moved out).
func checkState(st *state.State) error {
	type tally struct {
		byStatus [4]int
		bytes    int64
	}
	tallies := make(map[uint64]*tally)
	for _, qs := range st.Queues() {
		tallies[qs.ID()] = &tally{}
	}
	var errs []error
	total := 0
	st.Each(func(it *state.Item) {
		total++
		qs, t := st.Queue(it.Queue), tallies[it.Queue]
		if qs == nil {
			errs = append(errs, fmt.Errorf("item %d is stored in queue %d, which does not exist", it.ID, it.Queue))
			return
		}
		if it.Status < state.Waiting || it.Status > state.Dead {
			errs = append(errs, fmt.Errorf("item %d has status %d", it.ID, it.Status))
			return
		}
		t.byStatus[it.Status]++
		t.bytes += int64(it.Body.Len)
		if it.Key() != "" {
			if id, held := qs.KeyHolder(it.Key(), st.LastTime(), 0); !held || id != it.ID {
				errs = append(errs, fmt.Errorf("item %d of queue %d: its key %q is held by %d (held %v)", it.ID, it.Queue, it.Key(), id, held))
			}
		}
		if st.Leased(it.Receipt) != nil && it.Status != state.Leased {
			errs = append(errs, fmt.Errorf("item %d is %s but holds an open lease", it.ID, it.Status))
		}
	})
	if total != st.TotalLen() {
		errs = append(errs, fmt.Errorf("%d items stored, TotalLen says %d", total, st.TotalLen()))
	}
	for _, qs := range st.Queues() {
		g, c, t := qs.Gauges(), qs.Counters(), tallies[qs.ID()]
		what := fmt.Sprintf("queue %q (%d)", qs.Name(), qs.ID())
		switch {
		case g.Items != qs.Len() || g.Ready+g.Delayed != t.byStatus[state.Waiting] || g.Leased != t.byStatus[state.Leased] ||
			g.Dead != t.byStatus[state.Dead] || g.Items != t.byStatus[1]+t.byStatus[2]+t.byStatus[3]:
			errs = append(errs, fmt.Errorf("%s: gauges %+v do not match the items: %d waiting, %d leased, %d dead",
				what, g, t.byStatus[state.Waiting], t.byStatus[state.Leased], t.byStatus[state.Dead]))
		case g.Bytes != t.bytes:
			errs = append(errs, fmt.Errorf("%s: gauge bytes %d, items hold %d", what, g.Bytes, t.bytes))
		case c.Put+c.MovedIn != uint64(g.Items)+c.Acked+c.Discarded+c.Purged+c.MovedOut:
			errs = append(errs, fmt.Errorf("%s: items not conserved: put %d + moved in %d != stored %d + acked %d + discarded %d + purged %d + moved out %d",
				what, c.Put, c.MovedIn, g.Items, c.Acked, c.Discarded, c.Purged, c.MovedOut))
		case len(qs.DeadLetters(0)) != g.Dead:
			errs = append(errs, fmt.Errorf("%s: %d dead letters listed, gauge says %d", what, len(qs.DeadLetters(0)), g.Dead))
		}
	}
	return errors.Join(errs...)
}
