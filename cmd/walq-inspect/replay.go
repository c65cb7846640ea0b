package main

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"

	"github.com/walq/walq/internal/rebuild"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Reading a queue that may be running.
//
// Everything here only reads: wal.Scan, wal.ScanFormat1, wal.ListSegments,
// wal.ListSnapshots and wal.ReadSnapshot open files read-only and never
// call wal.Open. A running queue changes the directory under the reader in
// three ways, and none of them is corruption:
//
//   - Frames are appended to the last segment, one write per commit batch.
//     Bytes at its end that do not make a whole frame yet are reported by
//     wal.Scan as a tail that recovery would cut (a torn write after a
//     crash looks the same, and the next open cuts it).
//   - A compaction writes a newer snapshot, removes whole segments at the
//     front of the log and deletes older snapshots; nothing is rewritten.
//     A snapshot that vanishes before it is read is skipped; a segment that
//     vanishes makes wal.Scan start over from the new listing; records that
//     were removed before they were read make the replay start over from
//     the newest snapshot (see replayer.run).
//   - Segments roll: a new last segment appears, created whole with its
//     header (a temp file renamed once the header is durable).
//
// What a replay rebuilds is what recovery in the root package rebuilds: a
// snapshot read and verified by rebuild.ReadSnapshot, then every record
// after it, each applied by rebuild.ApplyDecoded, which reports a record
// the state refuses as corruption. The replayer keeps its own scan loop
// because it must start over when a running queue compacts under it, and
// annotates each record for the commands that print them.

// maxRestarts bounds how often a replay starts over because a compaction
// moved the log under it.
const maxRestarts = 20

// snapshot is a snapshot file and what reading it gave.
type snapshot struct {
	File wal.SnapshotFile
	St   *state.State // nil when the file does not verify
	Err  error        // why not
}

// readSnapshots reads and verifies every snapshot in dir, newest first,
// each of directory want when want is not zero (see rebuild.ReadSnapshot).
// A file that vanishes before it is read was removed by a compaction and is
// left out.
func readSnapshots(dir string, want wal.DirID) ([]snapshot, error) {
	files, err := wal.ListSnapshots(dir)
	if err != nil {
		return nil, err
	}
	var out []snapshot
	for _, f := range files {
		st, err := rebuild.ReadSnapshot(dir, f, want)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var ce *wal.CorruptionError
		if err != nil && !errors.As(err, &ce) {
			return nil, err // an I/O error, not a verdict on the file
		}
		out = append(out, snapshot{File: f, St: st, Err: err})
	}
	return out, nil
}

// event is one record with what the replay knows about it.
type event struct {
	Pos   wal.Position
	Type  byte
	Queue uint64       // the queue the record belongs to (0: the default queue)
	Rec   state.Record // nil when the body does not decode
	Err   error        // why it does not decode
	// IDs are the items the record changes, in record order. IDsKnown is
	// false when they cannot be told: before the replay has a state, the
	// items behind a receipt whose lease record was compacted away are not
	// known, nor are the IDs of a put before the first snapshot-covered one.
	IDs      []uint64
	IDsKnown bool
	// Attempt is the attempt a lease starts (0: not known).
	Attempt int32
	// Discarded is set on a lease ending whose next due time is at or after
	// the item's deadline: the item is dropped, not retried.
	Discarded bool

	// The queue the record acts on, by name: for a create-queue record the
	// queue it creates (its ID is the record's index), for every other
	// record that of the queue field ("" for the default queue). QueueKnown
	// is false when the name cannot be told (a queue created before the
	// oldest record read).
	QueueName  string
	QueueKnown bool
	// Of a move: the name of the queue it moves into.
	TargetName  string
	TargetKnown bool
	// Of a create-queue record: the ID of the last incarnation of the name
	// seen deleted (0: none seen).
	Earlier uint64
	// Of a delete-queue record: the leases open in the queue (-1: not
	// known). IDs are the items deleted with it.
	Leased int
}

// queueID is the ID of the queue the record acts on.
func (ev *event) queueID() uint64 {
	if ev.Type == state.TypeCreateQueue {
		return ev.Pos.Index
	}
	return ev.Queue
}

// touches reports whether the event changes item id.
func (ev *event) touches(id uint64) bool {
	for _, x := range ev.IDs {
		if x == id {
			return true
		}
	}
	return false
}

// replayer replays a queue directory's log into a state, optionally calling
// visit for the records in [from, to].
//
// The state is exact once it is built from a snapshot (or an empty queue)
// followed by every record after it. Before that, records the caller asked
// for that lie before the newest snapshot are annotated from what can be
// known without the state: the IDs of puts counted back from the next
// snapshot, the items of leases seen in the log.
type replayer struct {
	dir, logDir string
	log         *logReader
	want        wal.DirID // the directory ID snapshots must carry (zero: any)
	format1     bool      // the directory is of format 1: the state keeps its bodies
	from, to    uint64    // visit records with from <= index <= to (to 0: to the end)
	visit       func(*event) error

	st      *state.State // exact state after index next-1; nil while not known
	stErr   error        // why st is nil: the state cannot be rebuilt (corruption)
	base    *snapshot    // the snapshot st was built from (nil: an empty queue, or none yet)
	pending *snapshot    // while st is nil: the snapshot st becomes at its index
	next    uint64       // index of the next record to read

	// Without a state: the ID the next put gives (0: not known) and the
	// items of open leases by receipt.
	nextID   uint64
	counted  bool // nextID was counted back from the pending snapshot
	receipts map[uint64]uint64

	// Queue names by ID, from the snapshots and the create records read,
	// and the last deleted incarnation of each name.
	qnames  map[uint64]string
	deleted map[string]uint64

	snaps    []snapshot
	logFirst uint64
	scan     wal.ScanResult // of the last scan
	visited  uint64         // index of the last record visited
	notes    []string       // gaps in what was visited, for the caller to print

	// shortLogs counts the scans that ended before the snapshot they built
	// on. A directory listing taken while a running queue renames and
	// removes segments may miss some of them, so such a scan is taken again
	// (from a fresh listing) a few times before it is called corruption.
	shortLogs int
}

// maxShortLogs is how many times a log that ends before its snapshot is
// read again before the replay reports it.
const maxShortLogs = 5

func newReplayer(qf *queueFiles, from, to uint64, visit func(*event) error) *replayer {
	return &replayer{dir: qf.Dir, logDir: qf.LogDir, log: qf.reader(), want: qf.Format.ID, format1: qf.Format.Version == 1,
		from: from, to: to, visit: visit}
}

// errLogMoved means the log no longer starts where the replay needs it:
// a compaction truncated records the replay had not read yet.
type errLogMoved struct{ want, got uint64 }

func (e errLogMoved) Error() string {
	return fmt.Sprintf("log moved: need index %d, it now starts at %d", e.want, e.got)
}

// run replays from the start, and from the last position on each later
// call (for --follow), starting over from a newer snapshot when a
// compaction truncated records before they were read.
func (r *replayer) run() error {
	for restarts := 0; ; restarts++ {
		if r.snaps == nil {
			if err := r.start(); err != nil {
				return err
			}
		}
		err := r.scanLog()
		var moved errLogMoved
		if !errors.As(err, &moved) && !errors.Is(err, wal.ErrCompacted) {
			return err
		}
		if restarts == maxRestarts {
			return fmt.Errorf("the log kept moving under the reader (compaction); %d restarts: %w", restarts, err)
		}
		// Visit no record twice: start again after the last one visited.
		if r.visited >= r.from {
			r.from = r.visited + 1
		}
		r.snaps = nil
		if err := r.start(); err != nil {
			return err
		}
		if r.visit != nil && r.logFirst > r.from {
			last := r.logFirst - 1
			if r.to != 0 {
				last = min(last, r.to) // those after --to were not asked for
			}
			r.notes = append(r.notes, fmt.Sprintf("records %d..%d were compacted away before they could be read",
				r.from, last))
			r.from = r.logFirst
		}
	}
}

// start picks what to build the state from, the way recovery does.
func (r *replayer) start() error {
	for restarts := 0; ; restarts++ {
		snaps, err := readSnapshots(r.dir, r.want)
		if err != nil {
			return err
		}
		if snaps == nil {
			snaps = []snapshot{}
		}
		first, err := r.log.start()
		if err != nil {
			return err
		}
		r.snaps, r.logFirst = snaps, first
		r.st, r.stErr, r.base, r.pending, r.nextID, r.counted = nil, nil, nil, nil, 0, false
		r.receipts = make(map[uint64]uint64)
		if r.qnames == nil {
			r.qnames, r.deleted = make(map[uint64]string), make(map[string]uint64)
		}
		for _, sn := range snaps {
			if sn.St != nil {
				for _, q := range sn.St.Queues() {
					r.qnames[q.ID()] = q.Name()
				}
			}
		}
		if r.choose() {
			return nil
		}
		// No snapshot reaches the log. A compaction may have written a new
		// snapshot and truncated the log after the snapshots were listed:
		// look again before calling it corruption.
		again, err := readSnapshots(r.dir, r.want)
		if err != nil {
			return err
		}
		if sameSnapshots(again, snaps) || restarts == maxRestarts {
			return nil
		}
	}
}

func sameSnapshots(a, b []snapshot) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].File.Name != b[i].File.Name {
			return false
		}
	}
	return true
}

// choose picks the base of the replay. It returns false when no snapshot
// reaches the log (stErr says so).
func (r *replayer) choose() bool {
	ok := r.chooseBase()
	if ok && r.st != nil && r.format1 {
		// A format-1 log tells where its entries are, not its bodies.
		r.st.KeepBodies()
	}
	return ok
}

func (r *replayer) chooseBase() bool {
	startAt := max(r.from, r.logFirst, 1)
	// Exact from the start: the newest snapshot before startAt that the log
	// reaches back to, or the empty queue when the log was never truncated.
	for i := range r.snaps {
		s := &r.snaps[i]
		lsn := s.File.LSN
		if s.St != nil && lsn < startAt && lsn+1 >= r.logFirst && (r.to == 0 || lsn <= r.to) {
			r.st, r.base, r.next = s.St, s, lsn+1
			return true
		}
	}
	if r.logFirst <= 1 {
		r.st, r.next = state.New(), 1
		return true
	}
	// Records before the newest snapshot were asked for: read them without a
	// state, and take the state from the oldest snapshot at or after startAt.
	r.next = startAt
	for i := len(r.snaps) - 1; i >= 0; i-- {
		s := &r.snaps[i]
		if s.St != nil && s.File.LSN >= startAt {
			r.pending = s
			return true
		}
	}
	r.stErr = r.unreachable()
	return false
}

// unreachable describes a log that no verified snapshot reaches.
func (r *replayer) unreachable() error {
	var reason string
	var bad []string
	for _, s := range r.snaps {
		if s.St == nil {
			bad = append(bad, s.File.Name)
		}
	}
	switch {
	case len(r.snaps) == 0:
		reason = fmt.Sprintf("the log starts at index %d and there is no snapshot: records 1..%d are missing",
			r.logFirst, r.logFirst-1)
	case len(bad) == len(r.snaps):
		reason = fmt.Sprintf("the log starts at index %d and no snapshot verifies (%s)", r.logFirst, strings.Join(bad, ", "))
	default:
		reason = fmt.Sprintf("the log starts at index %d, after every snapshot that verifies: records are missing",
			r.logFirst)
	}
	return &wal.CorruptionError{Dir: r.logDir, File: r.log.segmentName(r.logFirst), Index: r.logFirst, Err: errors.New(reason)}
}

// scanLog reads the log from r.next.
func (r *replayer) scanLog() error {
	if r.to != 0 && r.next > r.to {
		return nil
	}
	if r.pending != nil && !r.counted {
		if err := r.countPuts(); err != nil {
			return err
		}
		r.counted = true
	}
	res, err := r.log.scan(r.next, r.to, r.record)
	if errors.Is(err, fs.ErrNotExist) && !r.log.exists() {
		return nil // a queue created but never opened far enough to make its log
	}
	r.scan = res
	if err != nil {
		return err
	}
	if res.First > r.next {
		// No record was read (the first one read would have been checked
		// against r.next), and the log now starts after the records the
		// replay needs: a compaction removed them, and, with --to, every
		// record left is past it, so the scan stopped before reading any.
		return errLogMoved{want: r.next, got: res.First}
	}
	var short *wal.CorruptionError
	switch {
	case r.to == 0 && r.st != nil && r.st.LastLSN() > res.Last && r.stErr == nil:
		short = &wal.CorruptionError{Dir: r.dir, File: r.base.File.Name, Index: r.st.LastLSN(),
			Err: fmt.Errorf("the snapshot covers index %d but the log ends at %d", r.st.LastLSN(), res.Last)}
	case r.to == 0 && r.pending != nil:
		short = &wal.CorruptionError{Dir: r.dir, File: r.pending.File.Name, Index: r.pending.File.LSN,
			Err: fmt.Errorf("the snapshot covers index %d but the log ends at %d", r.pending.File.LSN, res.Last)}
	}
	if short != nil && r.shortLogs < maxShortLogs {
		r.shortLogs++
		return errLogMoved{want: r.next, got: res.Last + 1}
	}
	if short != nil {
		return short
	}
	return nil
}

// errUncounted stops countPuts at a put whose items it cannot count.
var errUncounted = errors.New("a put whose items cannot be counted")

// countPuts counts the items put from r.next up to the pending snapshot, so
// that the IDs of those puts can be counted back from the snapshot's next
// ID.
func (r *replayer) countPuts() error {
	want := r.next
	var n uint64
	_, err := r.log.scan(r.next, r.pending.File.LSN, func(pos wal.Position, rec wal.Record) error {
		if pos.Index != want {
			return errLogMoved{want: want, got: pos.Index}
		}
		want++
		if rec.Type == state.TypePut {
			// Counted without decoding the items, so a put of a newer walq
			// (fields this build does not know) counts too.
			k, err := state.PutItemCount(rec.Body)
			if err != nil {
				return errUncounted
			}
			n += uint64(k)
		}
		return nil
	})
	if errors.Is(err, errUncounted) {
		return nil // a put that cannot be counted: the IDs stay unknown
	}
	if err != nil {
		var ce *wal.CorruptionError
		if errors.As(err, &ce) {
			return nil // the main scan reports it; the IDs stay unknown
		}
		return err
	}
	if next := r.pending.St.NextID(); n < next {
		r.nextID = next - n
	}
	return nil
}

// record handles one record of the scan.
func (r *replayer) record(pos wal.Position, rec wal.Record) error {
	if pos.Index != r.next {
		return errLogMoved{want: r.next, got: pos.Index}
	}
	ev := r.annotate(pos, rec)
	if pos.Index >= r.from && r.visit != nil {
		if err := r.visit(ev); err != nil {
			return err
		}
		r.visited = pos.Index
	}
	r.apply(ev)
	r.next = pos.Index + 1
	if r.pending != nil && pos.Index == r.pending.File.LSN {
		r.st, r.base, r.pending = r.pending.St, r.pending, nil
	}
	return nil
}

// annotate decodes a record and works out the items it changes.
func (r *replayer) annotate(pos wal.Position, rec wal.Record) *event {
	ev := &event{Pos: pos, Type: rec.Type, Queue: rec.Queue, Leased: -1}
	ev.QueueName, ev.QueueKnown = r.queueName(rec.Queue)
	sr, err := state.Decode(rec.Type, rec.Body)
	if err != nil {
		ev.Err = err
		return ev
	}
	ev.Rec = sr
	leased := func(receipt uint64) {
		if r.st != nil {
			if it := r.st.Leased(receipt); it != nil {
				ev.IDs, ev.IDsKnown = []uint64{it.ID}, true
			}
			return
		}
		if id, ok := r.receipts[receipt]; ok {
			ev.IDs, ev.IDsKnown = []uint64{id}, true
		}
	}
	switch x := sr.(type) {
	case *state.Put:
		first := r.nextID
		if r.st != nil {
			first = r.st.NextID()
		}
		if first != 0 {
			for i := range x.Items {
				ev.IDs = append(ev.IDs, first+uint64(i))
			}
			ev.IDsKnown = true
		}
	case *state.Lease:
		ev.IDs, ev.IDsKnown = []uint64{x.ID}, true
		if r.st != nil {
			if it := r.st.Item(x.ID); it != nil {
				ev.Attempt = it.Attempts + 1
			}
		}
	case *state.Extend:
		leased(x.Receipt)
	case *state.Ack:
		leased(x.Receipt)
	case *state.End:
		leased(x.Receipt)
		if r.st != nil && !x.Dead {
			if it := r.st.Leased(x.Receipt); it != nil && it.Deadline() != 0 && x.Due >= it.Deadline() {
				ev.Discarded = true
			}
		}
	case *state.Discard:
		ev.IDs, ev.IDsKnown = x.IDs, true
	case *state.Redrive:
		ev.IDs, ev.IDsKnown = x.IDs, true
	case *state.Delete:
		ev.IDs, ev.IDsKnown = x.IDs, true
	case *state.Purge:
		switch {
		case !x.All:
			ev.IDs, ev.IDsKnown = x.IDs, true
		case r.st != nil:
			if q := r.st.Queue(ev.Queue); q != nil {
				for _, it := range q.DeadLetters(0) {
					ev.IDs = append(ev.IDs, it.ID)
				}
				ev.IDsKnown = true
			}
		}
	case *state.SetQueue, *state.PauseQueue:
		ev.IDsKnown = true // no item
	case *state.CreateQueue:
		ev.IDsKnown = true
		ev.QueueName, ev.QueueKnown = x.Name, true
		ev.Earlier = r.deleted[x.Name]
		r.qnames[pos.Index] = x.Name
	case *state.DeleteQueue:
		if r.st != nil {
			if q := r.st.Queue(ev.Queue); q != nil {
				r.st.Each(func(it *state.Item) {
					if it.Queue == q.ID() {
						ev.IDs = append(ev.IDs, it.ID)
					}
				})
				ev.IDsKnown, ev.Leased = true, q.Leased()
			}
		}
		if ev.QueueKnown {
			r.deleted[ev.QueueName] = ev.Queue
		}
	case *state.Move:
		ev.IDs, ev.IDsKnown = x.IDs, true
		ev.TargetName, ev.TargetKnown = r.queueName(x.Target)
	case *state.Relocate:
		for _, it := range x.Items {
			ev.IDs = append(ev.IDs, it.ID)
		}
		ev.IDsKnown = true
	}
	return ev
}

// queueName is the name of queue id ("" for the default queue), when known.
func (r *replayer) queueName(id uint64) (string, bool) {
	if id == state.DefaultQueue {
		return "", true
	}
	if r.st != nil {
		if q := r.st.Queue(id); q != nil {
			return q.Name(), true
		}
	}
	name, ok := r.qnames[id]
	return name, ok
}

// apply applies a record to the state, or, without a state, keeps what
// annotate needs.
func (r *replayer) apply(ev *event) {
	switch x := ev.Rec.(type) {
	case *state.Put:
		if r.nextID != 0 {
			r.nextID += uint64(len(x.Items))
		}
	case *state.Lease:
		r.receipts[ev.Pos.Index] = x.ID
	case *state.Ack:
		delete(r.receipts, x.Receipt)
	case *state.End:
		delete(r.receipts, x.Receipt)
	}
	if r.st == nil {
		return
	}
	// As rebuild.Apply, which recovery uses, refuses it.
	err := rebuild.CheckKnown(ev.Pos, ev.Type)
	if err == nil {
		err = rebuild.ApplyDecoded(r.st, r.logDir, ev.Pos, ev.Queue, ev.Type, ev.Rec, ev.Err)
	}
	if err != nil {
		r.stErr = err
		r.st, r.nextID = nil, 0
		return
	}
	r.nextID = r.st.NextID()
}

// state returns the exact state the replay reached, or why there is none.
func (r *replayer) state() (*state.State, error) {
	if r.st != nil {
		return r.st, nil
	}
	if r.stErr != nil {
		return nil, r.stErr
	}
	return nil, fmt.Errorf("the state at index %d can no longer be rebuilt: the log starts at index %d and no snapshot that verifies covers an index from %d to %d",
		r.next-1, r.logFirst, r.logFirst-1, r.next-1)
}

// isCorruption reports whether err is corruption rather than an I/O error.
func isCorruption(err error) bool { return errors.Is(err, wal.ErrCorrupt) }

// loadState rebuilds the state at index at (0: at the end of the log).
func loadState(qf *queueFiles, at uint64) (*state.State, *replayer, error) {
	from := uint64(math.MaxUint64)
	if at != 0 {
		from = at + 1
	}
	r := newReplayer(qf, from, at, nil)
	if err := r.run(); err != nil {
		return nil, r, err
	}
	st, err := r.state()
	if err != nil && r.stErr == nil && at != 0 {
		if at+1 < r.logFirst {
			err = fmt.Errorf("the state at index %d can no longer be rebuilt: the log starts at index %d, the records before were compacted away",
				at, r.logFirst)
		} else {
			err = fmt.Errorf("the state at index %d can no longer be rebuilt: no snapshot that verifies covers an index from %d (where the log starts) to %d",
				at, r.logFirst-1, at)
		}
	}
	if err != nil {
		return nil, r, err
	}
	if at != 0 && st.LastLSN() != at {
		return nil, r, fmt.Errorf("index %d is past the end of the log (%d)", at, st.LastLSN())
	}
	return st, r, nil
}
