package fuzz

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/walq/walq/state"
)

// FuzzFields fuzzes the tagged fields of records (state/fields.go) both
// ways. As bytes: a record body of the type the first byte names, with any
// map of fields after its fixed ones, must decode without panicking, or
// be refused; one that decodes re-encodes (without fields) to bytes that
// decode to the same record and encode again to the same bytes. As a
// record: fields built from the input, on an ack and on a put's items,
// encode only when canonical (tags ascending, each once, each value one
// msgpack value), and then decode to the record written without them
// (all optional), or are refused with ErrNewerField (a required one).
func FuzzFields(f *testing.F) {
	f.Add([]byte{state.TypeAck, 0x93, 0x01, 0x02, 0x81, 0x02, 0xc0})
	f.Add([]byte{state.TypeAck, 0x93, 0x01, 0x02, 0x82, 0x02, 0xc0, 0x03, 0xa1, 'x'})
	f.Add([]byte{state.TypePut, 0x93, 0x01, 0x91, 0x96, 0xc4, 0x01, 'a', 0x01, 0x00, 0x00, 0xa0, 0x81, 0x04, 0x92, 0x01, 0xc3, 0x81, 0x06, 0xde, 0x00, 0x01, 0x01, 0x02})
	f.Add([]byte{state.TypeNack, 0x97, 0x05, 0x01, 0x02, 0xa1, 'x', 0x03, 0xc2, 0x81, 0xcc, 0x80, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{state.TypeSetQueue, 0x93, 0x01, 0x96, 1, 2, 3, 4, 5, 6, 0x81, 0x0a, 0xd6, 0x01, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		checkFieldsDecode(t, data[0], data[1:])
		checkFieldsEncode(t, data)
	})
}

func checkFieldsDecode(t *testing.T, typ byte, body []byte) {
	rec, err := state.Decode(typ, body)
	if err != nil {
		return
	}
	b, err := state.Encode(nil, rec)
	if err != nil {
		t.Fatalf("a decoded %s record does not encode: %v", state.TypeName(typ), err)
	}
	back, err := state.Decode(typ, b)
	if err != nil || !reflect.DeepEqual(back, rec) && !sameButOffsets(back, rec) {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", rec, back, err)
	}
	again, err := state.Encode(nil, back)
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("encoding is not stable:\n  % x\n  % x", b, again)
	}
}

// sameButOffsets says whether a and b are puts (or relocates) that differ
// only in where their bodies lay in the bytes they were decoded from.
func sameButOffsets(a, b state.Record) bool {
	clear := func(r state.Record) state.Record {
		switch x := r.(type) {
		case *state.Put:
			c := *x
			c.Items = append([]state.NewItem(nil), x.Items...)
			for i := range c.Items {
				c.Items[i].BodyOffset = 0
			}
			return &c
		case *state.Relocate:
			c := *x
			c.Items = append([]state.Relocated(nil), x.Items...)
			for i := range c.Items {
				c.Items[i].BodyOffset = 0
			}
			return &c
		}
		return r
	}
	return reflect.DeepEqual(clear(a), clear(b))
}

// fieldsFrom cuts data into tagged fields: a tag byte, a length byte, and
// that many bytes of value.
func fieldsFrom(data []byte) state.Fields {
	var fs state.Fields
	for len(data) >= 2 {
		tag, n := uint64(data[0]), int(data[1])
		data = data[2:]
		n = min(n, len(data))
		fs = append(fs, state.Field{Tag: tag, Value: bytes.Clone(data[:n])})
		data = data[n:]
	}
	return fs
}

func checkFieldsEncode(t *testing.T, data []byte) {
	fs := fieldsFrom(data)
	half := len(fs) / 2
	for _, tc := range []struct {
		rec    state.Record
		fields state.Fields
		items  []state.Fields
	}{
		{&state.Ack{Time: 1, Receipt: 2}, fs, nil},
		{&state.Put{Time: 1, Items: []state.NewItem{{Body: []byte("b"), Due: 1}, {Due: 2}}}, fs[half:], []state.Fields{fs[:half]}},
		{&state.Put{Time: 1, Items: []state.NewItem{{Body: []byte("c"), Due: 1, Key: "k"}, {Body: []byte("d"), Due: 2}}}, nil, []state.Fields{nil, fs}},
	} {
		b, err := state.EncodeWithFields(nil, tc.rec, tc.fields, tc.items)
		if err != nil {
			continue // out of order, repeated, or not one value each
		}
		required := false
		for _, f := range fs {
			required = required || f.Required()
		}
		back, err := state.Decode(tc.rec.Type(), b)
		if required {
			if !errors.Is(err, state.ErrNewerField) {
				t.Fatalf("%+v with a required field decoded as %+v, %v; want ErrNewerField", tc.rec, back, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%+v with fields %v encodes to bytes that do not decode: %v", tc.rec, fs, err)
		}
		plain, err := state.Encode(nil, tc.rec)
		if err != nil {
			t.Fatal(err)
		}
		want, err := state.Decode(tc.rec.Type(), plain)
		if err != nil || !sameButOffsets(back, want) {
			t.Fatalf("decode(with fields) = %+v, want %+v", back, want)
		}
		if again, err := state.Encode(nil, back); err != nil || !bytes.Equal(again, plain) {
			t.Fatalf("%+v: the record without its fields is not the plain record's bytes: %v", tc.rec, err)
		}
		if p, ok := back.(*state.Put); ok {
			for i, it := range p.Items {
				if !bytes.Equal(b[it.BodyOffset:it.BodyOffset+len(it.Body)], it.Body) {
					t.Fatalf("put item %d: offset %d does not find its body in % x", i, it.BodyOffset, b)
				}
			}
		}
	}
}
