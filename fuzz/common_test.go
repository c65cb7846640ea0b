package fuzz

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
	"testing"

	"github.com/walq/walq/state"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// envelopeCRCOK checks an entry's CRC as wal/envelope.go documents the
// frozen layout, independently of the decoder under test.
func envelopeCRCOK(entry []byte) bool {
	if len(entry) <= 14 {
		return false
	}
	crc := crc32.Update(0, castagnoli, entry[:10])
	crc = crc32.Update(crc, castagnoli, entry[14:])
	return crc == binary.BigEndian.Uint32(entry[10:14])
}

// snapshotFile frames body as a snapshot file covering lsn, as
// wal/snapshot.go documents the frozen layout.
func snapshotFile(lsn uint64, body []byte) []byte {
	b := []byte("WALQSNAP")
	b = append(b, 1)
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	crc := crc32.Update(0, castagnoli, b)
	crc = crc32.Update(crc, castagnoli, body)
	b = binary.BigEndian.AppendUint32(b, crc)
	return append(b, body...)
}

// sampleRecords is one record of each kind, consistent with each other when
// applied in order from an empty state: the seeds of the record targets.
func sampleRecords() []state.Record {
	return []state.Record{
		&state.Put{Time: 100, Items: []state.NewItem{
			{Body: []byte("a"), Due: 100, Priority: 1, Key: "ka"},
			{Body: []byte("bb"), Due: 200, Deadline: 5000},
			{Body: []byte("ccc"), Due: 100},
		}},
		&state.Lease{Time: 300, ID: 1, LeaseEnd: 1300},       // lsn 2
		&state.Extend{Time: 400, Receipt: 2, LeaseEnd: 2000}, // lsn 3
		&state.Ack{Time: 500, Receipt: 2},                    // lsn 4
		&state.Lease{Time: 600, ID: 3, LeaseEnd: 1600},       // lsn 5
		&state.End{Kind: state.TypeNack, Time: 700, Receipt: 5, Cause: "boom", Due: 800},
		&state.Lease{Time: 900, ID: 3, LeaseEnd: 1900}, // lsn 7
		&state.End{Kind: state.TypeDeadLetter, Time: 950, Receipt: 7, Cause: "poison", Due: 950, Dead: true},
		&state.Redrive{Time: 1000, IDs: []uint64{3}},    // lsn 9
		&state.Lease{Time: 1100, ID: 3, LeaseEnd: 1200}, // lsn 10
		&state.End{Kind: state.TypeExpire, Time: 1200, Receipt: 10, Cause: "lease expired", Due: 1200, Dead: true},
		&state.Purge{Time: 1300, IDs: []uint64{3}},   // lsn 12
		&state.Discard{Time: 6000, IDs: []uint64{2}}, // lsn 13
		&state.Purge{Time: 6100, All: true},          // lsn 14: nothing dead, still valid
	}
}

// queued is a record with the queue whose log holds it.
type queued struct {
	queue uint64
	rec   state.Record
}

// longCause is an error text longer than an attempt keeps, with
// MaxAttemptError falling inside a 3-byte rune.
var longCause = "x" + strings.Repeat("€", 300)

// queueRecords carries on after sampleRecords (LSN 15 on) with the records
// of named queues: a queue "jobs" is created (its ID is 15), takes a put,
// a lease and a dead letter, is paused, set, has the dead letter moved to
// the default queue, is resumed, deleted with a lease open and created
// again as queue 25.
func queueRecords() []queued {
	const jobs = 15
	return []queued{
		{0, &state.CreateQueue{Time: 6200, Name: "jobs", Settings: state.Settings{Visibility: 1000, MaxAttempts: 3, KeyWindow: 500, MaxInFlight: 1}}},
		{jobs, &state.Put{Time: 6300, Items: []state.NewItem{{Body: []byte("j1"), Due: 6300, Key: "ka"}, {Body: []byte("j2"), Due: 6300}}}}, // items 4, 5
		{jobs, &state.Lease{Time: 6400, ID: 4, LeaseEnd: 7400}},                                                                             // lsn 17
		{jobs, &state.End{Kind: state.TypeDeadLetter, Time: 6500, Receipt: 17, Cause: longCause, Due: 6500, Dead: true}},
		{jobs, &state.PauseQueue{Time: 6600, Until: math.MaxInt64}},
		{jobs, &state.SetQueue{Time: 6700, Settings: state.Settings{Visibility: 2000, MaxAttempts: 5, MaxItems: 10, MaxBytes: 1000, MaxInFlight: 2}}},
		{jobs, &state.Move{Time: 6800, Target: state.DefaultQueue, IDs: []uint64{4}}}, // key "ka" was released in the default queue
		{jobs, &state.PauseQueue{Time: 6900, Until: 0}},
		{jobs, &state.Lease{Time: 7000, ID: 5, LeaseEnd: 8000}},
		{jobs, &state.DeleteQueue{Time: 7100, Force: true}},
		{0, &state.CreateQueue{Time: 7200, Name: "jobs", Settings: state.Settings{Visibility: 1000, MaxAttempts: 1}}}, // queue 25
		{25, &state.PauseQueue{Time: 7300, Until: 9000}},
		{0, &state.Put{Time: 7400, Items: []state.NewItem{{Body: []byte("d1"), Due: 7400, Key: "kd"}, {Body: []byte("d2"), Due: 7400}}}}, // items 6, 7
		{0, &state.Lease{Time: 7500, ID: 7, LeaseEnd: 8500}},                                                                             // lsn 29
		{0, &state.Delete{Time: 7600, IDs: []uint64{6, 7}}},                                                                              // a waiting and a leased item
	}
}

// sampleHistory is sampleRecords in the default queue's log, then
// queueRecords.
func sampleHistory() []queued {
	var out []queued
	for _, rec := range sampleRecords() {
		out = append(out, queued{state.DefaultQueue, rec})
	}
	return append(out, queueRecords()...)
}

// historyState applies sampleHistory to an empty state.
func historyState(t testing.TB) *state.State {
	t.Helper()
	st := state.New()
	for i, r := range sampleHistory() {
		if err := st.ApplyAt(uint64(i+1), r.queue, r.rec, 4096); err != nil {
			t.Fatalf("sample record %d (%s, queue %d): %v", i+1, state.TypeName(r.rec.Type()), r.queue, err)
		}
	}
	return st
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
