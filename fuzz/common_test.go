package fuzz

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

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

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
