package state_test

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"testing"
	"testing/iotest"

	"github.com/walq/walq/internal/testrule"
	"github.com/walq/walq/state"
	"pgregory.net/rapid"
)

// freezeRun is a Freeze that the state machine advances by one piece
// after every action: whatever records come between, the pieces must add
// up, byte for byte, to the snapshot taken when it started.
type freezeRun struct {
	f    *state.Freeze
	of   *state.State // the state it freezes (Replay replaces the machine's)
	want []byte       // MarshalSnapshot when it started
	got  []byte
}

// Freeze starts a snapshot written in pieces, one per step.
func (mc *machine) Freeze(t *rapid.T) {
	if mc.frz.f != nil {
		t.Skip("a snapshot is being written")
	}
	want := marshal(t, mc.s)
	f, err := mc.s.Freeze()
	if err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	if _, err := mc.s.Freeze(); err == nil {
		t.Fatalf("a second Freeze started while one runs")
	}
	mc.frz = freezeRun{f: f, of: mc.s, want: want}
}

func (mc *machine) advanceFreeze(t *rapid.T) {
	r := &mc.frz
	if r.f == nil {
		return
	}
	if r.of != mc.s {
		r.f.Close()
		*r = freezeRun{}
		return
	}
	got, done, err := r.f.Next(r.got)
	r.got = got
	switch {
	case err != nil: // a queue's deletion too must not abort it
		t.Fatalf("Freeze.Next: %v", err)
	case done:
		if !bytes.Equal(r.got, r.want) {
			t.Fatalf("a snapshot written in pieces while records went on (%d bytes) is not the state it started from (%d bytes)", len(r.got), len(r.want))
		}
		if _, err := state.UnmarshalSnapshot(r.got); err != nil {
			t.Fatalf("UnmarshalSnapshot of a snapshot written in pieces: %v", err)
		}
		*r = freezeRun{}
	}
}

// TestFreezeWhileChanging starts a Freeze on a state of many chunks, then
// changes items of every chunk (acks, nacks, dead letters, puts) between
// its pieces: the pieces decode to the state as it was at the start, and
// the copies it made are only of the chunks changed before it reached
// them.
func TestFreezeWhileChanging(t *testing.T) {
	tp := newTape(t)
	const n = 5 * 4096
	var items []state.NewItem
	for i := range n {
		items = append(items, state.NewItem{Body: []byte{byte(i)}, Due: t0})
	}
	var ids []uint64
	for i := 0; i < n; i += 1000 {
		ids = append(ids, tp.put(t0, items[i:min(i+1000, n)]...)...)
	}
	want, err := tp.s.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := tp.s.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	step := 0
	for {
		var done bool
		got, done, err = f.Next(got)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		// Between pieces: end the leases of items all over the index.
		for k := 0; k < 50; k++ {
			id := ids[(step*7919+k*4099)%len(ids)]
			if it := tp.s.Item(id); it != nil && it.Status == state.Waiting {
				r := tp.lease(t0+1, id)
				switch k % 3 {
				case 0:
					tp.apply(&state.Ack{Time: t0 + 1, Receipt: r})
				case 1:
					tp.apply(&state.End{Kind: state.TypeNack, Time: t0 + 1, Receipt: r, Due: t0 + 5, Cause: "later"})
				}
			}
		}
		tp.put(t0+1, state.NewItem{Body: []byte("after"), Due: t0 + 1})
		step++
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the pieces (%d bytes) are not the snapshot at the start (%d bytes)", len(got), len(want))
	}
	if _, err := tp.s.Freeze(); err != nil {
		t.Fatalf("Freeze after the last piece: %v", err)
	}
}

// TestReadSnapshotInPieces: a snapshot of many items read through readers
// that return one byte, or half of what is asked, at a time decodes to the
// state UnmarshalSnapshot gives; one cut short, or with a byte more, is
// refused.
func TestReadSnapshotInPieces(t *testing.T) {
	tp := newTape(t)
	for i := 0; i < 8000; i += 1000 {
		var items []state.NewItem
		for j := range 1000 {
			// Long keys make the snapshot span the reader's pieces with
			// few items.
			items = append(items, state.NewItem{Body: []byte("body"), Due: t0, Key: fmt.Sprintf("k%0160d", i+j)})
		}
		tp.put(t0, items...)
	}
	tp.apply(&state.Ack{Time: t0 + 1, Receipt: tp.lease(t0+1, 5)})
	want, err := tp.s.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 3*(1<<20)/2 {
		t.Fatalf("a snapshot of %d bytes does not span the reader's pieces", len(want))
	}
	readers := map[string]func() io.Reader{
		"whole":       func() io.Reader { return bytes.NewReader(want) },
		"short reads": func() io.Reader { return &shortReader{r: bytes.NewReader(want)} },
		"half":        func() io.Reader { return iotest.HalfReader(bytes.NewReader(want)) },
		"data+err":    func() io.Reader { return iotest.DataErrReader(bytes.NewReader(want)) },
	}
	if testrule.Long {
		// A million and a half reads; the short reads also end
		// within 97 bytes of every piece boundary, in a tenth of the time.
		readers["one byte"] = func() io.Reader { return iotest.OneByteReader(bytes.NewReader(want)) }
	}
	for name, r := range readers {
		st, v, err := state.ReadSnapshot(r(), int64(len(want)))
		if err != nil || v != state.CurrentSnapshotVersion {
			t.Fatalf("%s: ReadSnapshot: version %d, %v", name, v, err)
		}
		if got := marshal(t, st); !bytes.Equal(got, want) {
			t.Fatalf("%s: read in pieces, the snapshot decodes to another state", name)
		}
	}
	if _, _, err := state.ReadSnapshot(bytes.NewReader(want[:len(want)-1]), int64(len(want)-1)); err == nil {
		t.Fatalf("a snapshot cut short by a byte decodes")
	}
	long := append(slices.Clone(want), 0)
	if _, _, err := state.ReadSnapshot(bytes.NewReader(long), int64(len(long))); err == nil {
		t.Fatalf("a snapshot with a byte after it decodes")
	}
}

// shortReader returns at most 1, 2, ... 97 bytes a read, in turn, so the
// reads of a snapshot end at odd offsets on both sides of every boundary
// between the pieces ReadSnapshot decodes.
type shortReader struct {
	r io.Reader
	n int
}

func (s *shortReader) Read(p []byte) (int, error) {
	s.n = s.n%97 + 1
	return s.r.Read(p[:min(len(p), s.n)])
}

// DeleteItems deletes stored items of a queue in any state (waiting,
// leased or dead), or shows that a delete naming an item of another queue,
// or one not stored, is refused.
func (mc *machine) DeleteItems(t *rapid.T) {
	m := mc.m
	q := mc.drawQueue(t, "queue")
	stored := m.in(q, func(it *mItem) bool { return it.status.stored() })
	if len(stored) == 0 {
		t.Skip("nothing stored in the queue")
	}
	var ids []uint64
	for _, it := range stored {
		ids = append(ids, it.id)
	}
	del := drawSubset(t, ids, "delete")
	if rapid.Bool().Draw(t, "name a stranger") {
		stranger := uint64(len(m.items) + 1) // never put
		for _, it := range m.items {
			if it.queue != q.id || !it.status.stored() {
				stranger = it.id
				break
			}
		}
		mc.mustReject(t, m.lsn+1, q.id, &state.Delete{Time: m.now, IDs: append(slices.Clone(del), stranger)}, "delete of an item not stored in the queue")
		return
	}
	mc.apply(t, q.id, &state.Delete{Time: m.now, IDs: del})
	for _, id := range del {
		it := m.item(id)
		if it.status == mDead {
			q.undead(id)
		}
		m.remove(it, mPurged)
		q.counters.Purged++
	}
}

// TestFreezeFollowsADeletion: a named queue deleted while a snapshot is
// written, its items spread over every chunk between the default queue's
// (some leased, some dead letters, some with keys), neither aborts it nor
// changes what it writes: the pieces are the snapshot at the start. The
// deletion keeps the removed items for the snapshot, so its cost is what
// the queue held (on 997a6e0 it aborted the snapshot; with queues created
// and deleted beside a large backlog, no compaction completed).
func TestFreezeFollowsADeletion(t *testing.T) {
	for _, at := range []int{0, 2} { // pieces written before the delete
		t.Run(fmt.Sprint("after-", at), func(t *testing.T) {
			tp := newTape(t)
			apply := func(queue uint64, rec state.Record) uint64 {
				t.Helper()
				lsn := tp.s.LastLSN() + 1
				if err := tp.s.ApplyAt(lsn, queue, rec, 4096); err != nil {
					t.Fatalf("Apply(%d, %s): %v", lsn, state.TypeName(rec.Type()), err)
				}
				return lsn
			}
			brief := apply(state.DefaultQueue, &state.CreateQueue{Time: t0, Name: "brief", Settings: state.Settings{Visibility: 10, MaxAttempts: 3}})
			const n = 3 * 4096
			var mine, theirs []uint64
			for i := 0; i < n; i += 512 {
				first := tp.s.NextID()
				batch := make([]state.NewItem, 512)
				queue := state.DefaultQueue
				if (i/512)%3 == 1 {
					queue = brief
					for j := range batch {
						batch[j].Key = fmt.Sprintf("k%d", i+j)
					}
				}
				for j := range batch {
					batch[j].Body, batch[j].Due = []byte{byte(j)}, t0
				}
				apply(queue, &state.Put{Time: t0, Items: batch})
				for j := range batch {
					if queue == brief {
						mine = append(mine, first+uint64(j))
					} else {
						theirs = append(theirs, first+uint64(j))
					}
				}
			}
			for k, id := range mine[:64] {
				r := apply(brief, &state.Lease{Time: t0, ID: id, LeaseEnd: t0 + 30*sec})
				if k%2 == 0 {
					apply(brief, &state.End{Kind: state.TypeDeadLetter, Time: t0, Receipt: r, Cause: "poison", Due: t0, Dead: true})
				}
			}
			// An item of the default queue in the chunk of the deleted
			// queue's last items: changed after the delete, its chunk is
			// copied with the deleted items put back.
			var neighbour uint64
			for _, id := range theirs {
				if id/4096 == mine[len(mine)-1]/4096 {
					neighbour = id
				}
			}
			want, err := tp.s.MarshalSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			f, err := tp.s.Freeze()
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			for piece := 0; ; piece++ {
				if piece == at {
					apply(brief, &state.DeleteQueue{Time: t0 + 1, Force: true})
					tp.put(t0+1, state.NewItem{Body: []byte("after"), Due: t0 + 1})
					tp.lease(t0+1, neighbour)
				}
				var done bool
				got, done, err = f.Next(got)
				if err != nil {
					t.Fatalf("piece %d, the delete before piece %d: %v", piece, at, err)
				}
				if done {
					break
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("the pieces (%d bytes) are not the snapshot at the start (%d bytes)", len(got), len(want))
			}
			if _, err := tp.s.Freeze(); err != nil {
				t.Fatalf("Freeze after the last piece: %v", err)
			}
		})
	}
}
