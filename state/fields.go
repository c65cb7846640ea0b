package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Tagged fields: how records grow without a new format version.
//
// A record is a msgpack array of its fields in a fixed order. Any record,
// and any item of a put, may carry one more element at the end: a map of
// tagged fields, from a tag (an unsigned integer) to one msgpack value,
// the tags in ascending order, each once and in its smallest unsigned
// form, the map never empty and its header the smallest that holds it,
// values nested at most maxFieldDepth (32) deep. A record
// that uses no tagged field is encoded exactly as before there were any.
//
// A tag's lowest bit says what a build that does not know it must do. An
// even tag is optional: such a build skips it (decodes the record as if it
// were not there), and a feature that writes one must stay correct when an
// older build drops it. An odd tag is required: the record cannot be applied
// correctly without it, so a build that does not know it refuses the
// record with an error wrapping ErrNewerField, which recovery reports as
// a newer format and never as damage (nothing is cut). This build knows
// no tag: docs/format-next.md lists the ones the coming features take.

// ErrNewerField is wrapped by the error of a record that carries a
// required tagged field this build does not know: a newer walq wrote it.
var ErrNewerField = errors.New("a required field of a newer walq")

// Field is one tagged field: its tag and its value, one msgpack value as
// encoded.
type Field struct {
	Tag   uint64
	Value []byte
}

// Required says whether a build that does not know the tag must refuse
// the record (odd tags) rather than skip the field (even tags).
func (f Field) Required() bool { return f.Tag&1 == 1 }

// Fields are the tagged fields of a record or an item, in ascending tag
// order, as EncodeWithFields writes them. A decoded record keeps none:
// this build knows no tag, and skips the optional ones.
type Fields []Field

// maxFieldDepth bounds the nesting of a tagged field's value.
const maxFieldDepth = 32

// appendFields appends fs as the trailing map of an array (nothing when fs
// is empty). The caller has counted it in the array's length.
func appendFields(b []byte, fs Fields) []byte {
	if len(fs) == 0 {
		return b
	}
	n := len(fs)
	switch {
	case n < 16:
		b = append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xde, byte(n>>8), byte(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
	}
	for _, f := range fs {
		b = appendUint(b, f.Tag)
		b = append(b, f.Value...)
	}
	return b
}

// extLen is the array length of a value of n fixed fields and fs.
func extLen(n int, fs Fields) int {
	if len(fs) > 0 {
		return n + 1
	}
	return n
}

// checkFields reports why fs cannot be encoded: tags out of order or
// repeated, a value that is not exactly one msgpack value.
func checkFields(fs Fields) error {
	for i, f := range fs {
		if i > 0 && f.Tag <= fs[i-1].Tag {
			return fmt.Errorf("tagged field %d after %d: tags must ascend, each once", f.Tag, fs[i-1].Tag)
		}
		d := &decoder{b: f.Value}
		d.skipValue(0)
		if err := d.end(); err != nil {
			return fmt.Errorf("tagged field %d: its value is not one msgpack value: %w", f.Tag, err)
		}
	}
	return nil
}

// arrayExt reads an array header of want fixed fields, or of want and a
// map of tagged fields; it reports whether the map follows the fixed
// fields.
func (d *decoder) arrayExt(want int) bool {
	n := d.arrayLen(-1)
	switch {
	case d.err != nil:
		return false
	case n == want:
		return false
	case n == want+1:
		return true
	}
	d.fail("array of %d fields, want %d (or %d with tagged fields)", n, want, want+1)
	return false
}

// skipFields reads past a map of tagged fields, checking it: the tags
// ascending and each once, the map not empty, each value one msgpack
// value. A required tag (this build knows none) fails the decoder with
// ErrNewerField; the optional ones are skipped.
func (d *decoder) skipFields() {
	c := d.byte1()
	var n int
	switch {
	case d.err != nil:
		return
	case c&0xf0 == 0x80:
		n = int(c & 0x0f)
	case c == 0xde:
		if p := d.next(2); p != nil {
			n = int(binary.BigEndian.Uint16(p))
		}
	case c == 0xdf:
		if p := d.next(4); p != nil {
			n = int(binary.BigEndian.Uint32(p))
		}
	default:
		d.fail("want a map of tagged fields, got 0x%02x", c)
		return
	}
	switch {
	case d.err != nil:
		return
	case n == 0:
		d.fail("an empty map of tagged fields")
		return
	case n < 16 && c != 0x80|byte(n), n >= 16 && n <= math.MaxUint16 && c != 0xde:
		d.fail("a map of %d tagged fields in a longer header than it needs", n)
		return
	case int64(n)*2 > d.left():
		d.fail("map of %d tagged fields in %d bytes", n, d.left())
		return
	}
	var last uint64
	for i := 0; i < n && d.err == nil; i++ {
		at := d.base + int64(d.off)
		tag := d.uint()
		if d.err != nil {
			return
		}
		if d.base+int64(d.off)-at != int64(uintLen(tag)) {
			d.fail("tag %d not in its smallest unsigned form", tag)
			return
		}
		if i > 0 && tag <= last {
			d.fail("tagged field %d after %d: tags must ascend, each once", tag, last)
			return
		}
		if tag&1 == 1 {
			d.err = fmt.Errorf("offset %d: %w: tag %d, which this build does not know", at, ErrNewerField, tag)
			return
		}
		last = tag
		d.skipValue(0)
	}
}

// skipValue reads past one msgpack value of any kind, nested at most
// maxFieldDepth deep. The value must lie in the decoder's buffer (tagged
// fields are read from records, never from a snapshot read in pieces).
func (d *decoder) skipValue(depth int) {
	if depth > maxFieldDepth {
		d.fail("a tagged field nested more than %d deep", maxFieldDepth)
		return
	}
	c := d.byte1()
	if d.err != nil {
		return
	}
	length := func(size int) int {
		p := d.next(size)
		switch size {
		case 1:
			if p != nil {
				return int(p[0])
			}
		case 2:
			if p != nil {
				return int(binary.BigEndian.Uint16(p))
			}
		case 4:
			if p != nil {
				return int(binary.BigEndian.Uint32(p))
			}
		}
		return 0
	}
	elems := func(n int) {
		if int64(n) > d.left() {
			d.fail("%d elements in %d bytes", n, d.left())
			return
		}
		for i := 0; i < n && d.err == nil; i++ {
			d.skipValue(depth + 1)
		}
	}
	switch {
	case c < 0x80 || c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3: // fixint, nil, bool
	case c&0xf0 == 0x80: // fixmap
		elems(2 * int(c&0x0f))
	case c&0xf0 == 0x90: // fixarray
		elems(int(c & 0x0f))
	case c&0xe0 == 0xa0: // fixstr
		d.next(int(c & 0x1f))
	case c == 0xc4 || c == 0xd9: // bin8, str8
		d.next(length(1))
	case c == 0xc5 || c == 0xda:
		d.next(length(2))
	case c == 0xc6 || c == 0xdb:
		d.next(length(4))
	case c == 0xc7: // ext8
		n := length(1)
		d.next(1 + n)
	case c == 0xc8:
		n := length(2)
		d.next(1 + n)
	case c == 0xc9:
		n := length(4)
		d.next(1 + n)
	case c == 0xca: // float32
		d.next(4)
	case c == 0xcb: // float64
		d.next(8)
	case c == 0xcc || c == 0xd0:
		d.next(1)
	case c == 0xcd || c == 0xd1:
		d.next(2)
	case c == 0xce || c == 0xd2:
		d.next(4)
	case c == 0xcf || c == 0xd3:
		d.next(8)
	case c == 0xd4: // fixext 1, 2, 4, 8, 16
		d.next(2)
	case c == 0xd5:
		d.next(3)
	case c == 0xd6:
		d.next(5)
	case c == 0xd7:
		d.next(9)
	case c == 0xd8:
		d.next(17)
	case c == 0xdc:
		elems(length(2))
	case c == 0xdd:
		elems(length(4))
	case c == 0xde:
		elems(2 * length(2))
	case c == 0xdf:
		elems(2 * length(4))
	default: // 0xc1, never used
		d.fail("byte 0x%02x starts no msgpack value", c)
	}
}

// uintLen is how many bytes appendUint takes for v.
func uintLen(v uint64) int {
	switch {
	case v < 128:
		return 1
	case v <= math.MaxUint8:
		return 2
	case v <= math.MaxUint16:
		return 3
	case v <= math.MaxUint32:
		return 5
	}
	return 9
}

// PutItemCount reads how many items a put record's body holds without
// decoding them: it reads as far as the item list's length, so it answers
// for a put whose items carry fields this build does not know.
func PutItemCount(body []byte) (int, error) {
	d := &decoder{b: body}
	d.arrayExt(2)
	d.int()
	n := d.arrayLen(-1)
	if d.err != nil {
		return 0, fmt.Errorf("put record: %w", d.err)
	}
	return n, nil
}
