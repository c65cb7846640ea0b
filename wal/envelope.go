package wal

import (
	"encoding/binary"
	"hash/crc32"
)

// Format 1 (read only, for migration): every tidwall/wal entry of a
// format-1 log is one record in this envelope:
//
//	 0         1         2                                10                  14
//	+---------+---------+---------------------------------+-------------------+-------------...
//	| version |  type   |        LSN (uint64, BE)         | CRC-32C (uint32,  |  body
//	|  = 1    |  != 0   |                                 |  BE)              |  (>= 1 byte)
//	+---------+---------+---------------------------------+-------------------+-------------...
//
// The CRC is CRC-32C (Castagnoli) over version, type, LSN and body, that is
// every byte except the CRC field itself. The body is msgpack written by the
// caller and opaque here. The LSN equals the record's tidwall index, so a
// record copied to the wrong place, a lost record or a repeated one is
// detected even when its CRC is good.
//
// The layout and these constants are frozen: a record written once must read
// forever. A new layout gets a new version byte, and DecodeRecord keeps
// reading every older version.
const (
	// Version1 is the only envelope version so far. Version 0 is never valid,
	// so a zero-filled region never decodes as a record.
	Version1 byte = 1
	// HeaderSize is the size of the fixed part before the body.
	HeaderSize = 14
)

// Offsets of the header fields, frozen with the layout above.
const (
	offVersion = 0
	offType    = 1
	offLSN     = 2
	offCRC     = 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record is one decoded envelope.
type Record struct {
	Type  byte
	LSN   uint64
	Queue uint64 // the queue the record belongs to (format 2; 0 in format 1: the default queue)
	Body  []byte
}

// AppendRecord appends the envelope of (typ, lsn, body) to dst. An empty body
// or type 0 is a programming error and panics: such a record could never be
// read back.
func AppendRecord(dst []byte, typ byte, lsn uint64, body []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	dst = append(dst, body...)
	sealRecord(dst[start:], typ, lsn)
	return dst
}

// sealRecord fills in the header of rec, whose body is already in
// rec[HeaderSize:].
func sealRecord(rec []byte, typ byte, lsn uint64) {
	if typ == 0 {
		panic("wal: record type 0 is reserved")
	}
	if len(rec) <= HeaderSize {
		panic("wal: record body must not be empty")
	}
	rec[offVersion] = Version1
	rec[offType] = typ
	binary.BigEndian.PutUint64(rec[offLSN:], lsn)
	binary.BigEndian.PutUint32(rec[offCRC:], recordCRC(rec))
}

func recordCRC(rec []byte) uint32 {
	crc := crc32.Update(0, castagnoli, rec[:offCRC])
	return crc32.Update(crc, castagnoli, rec[HeaderSize:])
}

// DecodeRecord decodes one entry. Body aliases entry. Every error is a match
// for ErrCorrupt (without a location; the reader adds it). It never panics.
func DecodeRecord(entry []byte) (Record, error) {
	if len(entry) == 0 {
		return Record{}, corruptReason("empty entry")
	}
	if entry[offVersion] != Version1 {
		return Record{}, reasonf("unknown record version %d", entry[offVersion])
	}
	if len(entry) <= HeaderSize {
		return Record{}, reasonf("short record: %d bytes", len(entry))
	}
	if entry[offType] == 0 {
		return Record{}, corruptReason("record type 0")
	}
	if got, want := binary.BigEndian.Uint32(entry[offCRC:]), recordCRC(entry); got != want {
		return Record{}, corruptReason("crc mismatch")
	}
	return Record{
		Type: entry[offType],
		LSN:  binary.BigEndian.Uint64(entry[offLSN:]),
		Body: entry[HeaderSize:],
	}, nil
}
