package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// The record and snapshot bodies are msgpack: each record is an array of its
// fields in declaration order, integers in their smallest msgpack form,
// bodies as bin, keys and causes as str. Any msgpack library can read them;
// walq encodes and decodes them by hand because reflection cost about 2 µs
// a record on the hot path, this about a tenth of that and no allocation
// beyond the bodies.

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return append(b, 0xdc, byte(n>>8), byte(n))
	default:
		return append(b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
	}
}

func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return append(b, 0xd1, byte(v>>8), byte(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
	}
}

func appendBin(b []byte, v []byte) []byte {
	n := len(v)
	switch {
	case n <= math.MaxUint8:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xc5, byte(n>>8), byte(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, v...)
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

func appendIDs(b []byte, ids []uint64) []byte {
	b = appendArrayLen(b, len(ids))
	for _, id := range ids {
		b = appendUint(b, id)
	}
	return b
}

var errShort = errors.New("unexpected end of data")

// decoder reads msgpack values; the first error sticks and later reads
// return zero values, so callers check err once at the end. It reads from
// b, or, when r is set, from r through b a piece at a time: then what
// next returns is valid only until the next call.
type decoder struct {
	b    []byte
	off  int
	err  error
	r    io.Reader
	size int64 // bytes r holds
	base int64 // bytes of r consumed before b[0]
	eof  bool  // r has no more

	version int // of the snapshot body being decoded
}

// readPiece is how much a decoder reading from r reads at once.
const readPiece = 1 << 20

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("offset %d: "+format, append([]any{d.base + int64(d.off)}, args...)...)
	}
}

// fill reads from r until b holds at least n bytes past off, or r ends.
func (d *decoder) fill(n int) {
	rest := len(d.b) - d.off
	if d.off > 0 {
		copy(d.b, d.b[d.off:])
		d.base += int64(d.off)
		d.b, d.off = d.b[:rest], 0
	}
	if need := max(n, readPiece); cap(d.b) < need {
		d.b = append(make([]byte, 0, need), d.b...)
	}
	for len(d.b) < n && !d.eof {
		k, err := d.r.Read(d.b[len(d.b):cap(d.b)])
		d.b = d.b[:len(d.b)+k]
		if err == io.EOF {
			d.eof = true
		} else if err != nil {
			d.fail("read: %v", err)
			return
		}
	}
}

// left is how many bytes are left to read.
func (d *decoder) left() int64 {
	if d.r != nil {
		return d.size - d.base - int64(d.off)
	}
	return int64(len(d.b) - d.off)
}

func (d *decoder) next(n int) []byte {
	if d.err == nil && n >= 0 && len(d.b)-d.off >= n { // the usual case: n bytes at hand
		p := d.b[d.off : d.off+n : d.off+n]
		d.off += n
		return p
	}
	if d.err != nil {
		return nil
	}
	if n >= 0 && len(d.b)-d.off < n && d.r != nil && d.base+int64(d.off)+int64(n) <= d.size {
		d.fill(n)
		if d.err != nil {
			return nil
		}
	}
	if n < 0 || len(d.b)-d.off < n {
		d.fail("%v", errShort)
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *decoder) byte1() byte {
	if d.err == nil && d.off < len(d.b) {
		c := d.b[d.off]
		d.off++
		return c
	}
	p := d.next(1)
	if p == nil {
		return 0
	}
	return p[0]
}

// arrayLen reads an array header of exactly want elements (want < 0: any
// number, bounded by the bytes left, since every element takes one).
func (d *decoder) arrayLen(want int) int {
	c := d.byte1()
	var n int
	switch {
	case d.err != nil:
		return 0
	case c&0xf0 == 0x90:
		n = int(c & 0x0f)
	case c == 0xdc:
		p := d.next(2)
		if p == nil {
			return 0
		}
		n = int(binary.BigEndian.Uint16(p))
	case c == 0xdd:
		p := d.next(4)
		if p == nil {
			return 0
		}
		n = int(binary.BigEndian.Uint32(p))
	case c == 0xc0 && want < 0:
		return 0
	default:
		d.fail("want an array, got 0x%02x", c)
		return 0
	}
	if want >= 0 && n != want {
		d.fail("array of %d fields, want %d", n, want)
		return 0
	}
	if left := d.left(); int64(n) > left {
		d.fail("array of %d elements in %d bytes", n, left)
		return 0
	}
	return n
}

func (d *decoder) uint() uint64 {
	c := d.byte1()
	switch {
	case d.err != nil:
		return 0
	case c < 0x80:
		return uint64(c)
	case c == 0xcc:
		return uint64(d.byte1())
	case c == 0xcd:
		if p := d.next(2); p != nil {
			return uint64(binary.BigEndian.Uint16(p))
		}
	case c == 0xce:
		if p := d.next(4); p != nil {
			return uint64(binary.BigEndian.Uint32(p))
		}
	case c == 0xcf:
		if p := d.next(8); p != nil {
			return binary.BigEndian.Uint64(p)
		}
	default:
		d.off--
		v := d.int()
		if v < 0 && d.err == nil {
			d.fail("negative value %d for an unsigned field", v)
		}
		return uint64(v)
	}
	return 0
}

func (d *decoder) int() int64 {
	c := d.byte1()
	switch {
	case d.err != nil:
		return 0
	case c < 0x80:
		return int64(c)
	case c >= 0xe0:
		return int64(int8(c))
	case c == 0xd0:
		return int64(int8(d.byte1()))
	case c == 0xd1:
		if p := d.next(2); p != nil {
			return int64(int16(binary.BigEndian.Uint16(p)))
		}
	case c == 0xd2:
		if p := d.next(4); p != nil {
			return int64(int32(binary.BigEndian.Uint32(p)))
		}
	case c == 0xd3:
		if p := d.next(8); p != nil {
			return int64(binary.BigEndian.Uint64(p))
		}
	case c >= 0xcc && c <= 0xcf:
		d.off--
		v := d.uint()
		if v > math.MaxInt64 {
			d.fail("value %d overflows a signed field", v)
		}
		return int64(v)
	default:
		d.fail("want an integer, got 0x%02x", c)
	}
	return 0
}

func (d *decoder) int32() int32 {
	v := d.int()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("value %d overflows a 32-bit field", v)
		return 0
	}
	return int32(v)
}

// bin reads bytes into a fresh slice (the record outlives the data it was
// decoded from). Empty is nil.
func (d *decoder) bin() []byte {
	p := d.bin0()
	if len(p) == 0 {
		return nil
	}
	return append(make([]byte, 0, len(p)), p...)
}

// bin0 reads bytes without copying them: the result aliases the input.
func (d *decoder) bin0() []byte {
	c := d.byte1()
	var n int
	switch {
	case d.err != nil:
		return nil
	case c == 0xc0:
		return nil
	case c == 0xc4:
		n = int(d.byte1())
	case c == 0xc5:
		if p := d.next(2); p != nil {
			n = int(binary.BigEndian.Uint16(p))
		}
	case c == 0xc6:
		if p := d.next(4); p != nil {
			n = int(binary.BigEndian.Uint32(p))
		}
	default:
		d.fail("want bin, got 0x%02x", c)
		return nil
	}
	return d.next(n)
}

func (d *decoder) str() string {
	c := d.byte1()
	var n int
	switch {
	case d.err != nil:
		return ""
	case c&0xe0 == 0xa0:
		n = int(c & 0x1f)
	case c == 0xd9:
		n = int(d.byte1())
	case c == 0xda:
		if p := d.next(2); p != nil {
			n = int(binary.BigEndian.Uint16(p))
		}
	case c == 0xdb:
		if p := d.next(4); p != nil {
			n = int(binary.BigEndian.Uint32(p))
		}
	default:
		d.fail("want str, got 0x%02x", c)
		return ""
	}
	return string(d.next(n))
}

func (d *decoder) bool() bool {
	switch c := d.byte1(); {
	case d.err != nil:
		return false
	case c == 0xc2:
		return false
	case c == 0xc3:
		return true
	default:
		d.fail("want bool, got 0x%02x", c)
		return false
	}
}

func (d *decoder) ids() []uint64 {
	n := d.arrayLen(-1)
	if n == 0 {
		return nil
	}
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = d.uint()
	}
	return ids
}

// end fails unless every byte was read.
func (d *decoder) end() error {
	if d.err == nil && d.r != nil && d.off == len(d.b) {
		d.fill(1)
	}
	if d.err == nil && d.off != len(d.b) {
		d.fail("bytes after the value")
	}
	return d.err
}

func appendSettings(b []byte, s Settings) []byte {
	b = appendArrayLen(b, 6)
	for _, v := range []int64{s.Visibility, s.MaxAttempts, s.KeyWindow, s.MaxItems, s.MaxBytes, s.MaxInFlight} {
		b = appendInt(b, v)
	}
	return b
}

func (d *decoder) settings() Settings {
	var s Settings
	d.arrayLen(6)
	for _, p := range []*int64{&s.Visibility, &s.MaxAttempts, &s.KeyWindow, &s.MaxItems, &s.MaxBytes, &s.MaxInFlight} {
		*p = d.int()
	}
	return s
}
