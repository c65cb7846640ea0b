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
	// The state's gauges and counters when replay passed the LSN asked for
	// (ok false if it never did).
	at struct {
		gauges   state.Gauges
		counters state.Counters
		ok       bool
	}
}

func (ds *dirState) capture(lsn, want uint64) {
	if lsn == want {
		ds.at.gauges, ds.at.counters, ds.at.ok = ds.st.Gauges(), ds.st.Counters(), true
	}
}

// verifyDir does what walq-inspect verify does, read-only, on a queue
// directory that no process has open: every snapshot decodes and covers
// the LSN its name says; every record of the log verifies (framing, CRC,
// consecutive LSNs, no torn tail: a queue that was closed cleanly has
// none); the newest snapshot plus the log after it replays without a
// refused record; and the state it gives is self-consistent.
//
// It also captures the gauges and counters the state had at LSN at, to be
// compared with what a queue reported then.
func verifyDir(dir string, at uint64) (*dirState, error) {
	snaps, err := wal.ListSnapshots(dir)
	if err != nil {
		return nil, err
	}
	id, err := readDirID(dir)
	if err != nil {
		return nil, err
	}
	ds := &dirState{st: state.New()}
	for i, s := range snaps {
		st, err := rebuild.ReadSnapshot(dir, s, id)
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", s.Name, err)
		}
		if i == 0 {
			ds.st, ds.snapshotLSN = st, s.LSN
			ds.capture(s.LSN, at)
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
	ds.capture(0, at)
	if len(segs) > 0 && (ds.snapshotLSN+1 < whole.First || ds.snapshotLSN > whole.Last) {
		return nil, fmt.Errorf("verify log: snapshot covers %d, log holds %d..%d", ds.snapshotLSN, whole.First, whole.Last)
	}
	_, err = rebuild.Replay(ds.st, logDir, 0, func(lsn uint64) error {
		ds.capture(lsn, at)
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
// exactly one place, the gauges adding up, and items conserved (every item
// put is stored, acked, discarded or purged).
func checkState(st *state.State) error {
	g := st.Gauges()
	c := st.Counters()
	var byStatus [4]int
	var bytes int64
	var errs []error
	st.Each(func(it *state.Item) {
		if it.Status < state.Waiting || it.Status > state.Dead {
			errs = append(errs, fmt.Errorf("item %d has status %d", it.ID, it.Status))
			return
		}
		byStatus[it.Status]++
		bytes += int64(len(it.Body))
		if it.Key != "" {
			if id, held := st.KeyHolder(it.Key, st.LastTime(), 0); !held || id != it.ID {
				errs = append(errs, fmt.Errorf("item %d: its key %q is held by %d (held %v)", it.ID, it.Key, id, held))
			}
		}
		if st.Leased(it.Receipt) != nil && it.Status != state.Leased {
			errs = append(errs, fmt.Errorf("item %d is %s but holds an open lease", it.ID, it.Status))
		}
	})
	switch {
	case g.Items != st.Len() || g.Ready+g.Delayed != byStatus[state.Waiting] || g.Leased != byStatus[state.Leased] ||
		g.Dead != byStatus[state.Dead] || g.Items != byStatus[1]+byStatus[2]+byStatus[3]:
		errs = append(errs, fmt.Errorf("gauges %+v do not match the items: %d waiting, %d leased, %d dead",
			g, byStatus[state.Waiting], byStatus[state.Leased], byStatus[state.Dead]))
	case g.Bytes != bytes:
		errs = append(errs, fmt.Errorf("gauge bytes %d, items hold %d", g.Bytes, bytes))
	case c.Put != uint64(g.Items)+c.Acked+c.Discarded+c.Purged:
		errs = append(errs, fmt.Errorf("items not conserved: put %d != stored %d + acked %d + discarded %d + purged %d",
			c.Put, g.Items, c.Acked, c.Discarded, c.Purged))
	case uint64(len(st.DeadLetters(0))) != uint64(g.Dead):
		errs = append(errs, fmt.Errorf("%d dead letters listed, gauge says %d", len(st.DeadLetters(0)), g.Dead))
	}
	return errors.Join(errs...)
}
