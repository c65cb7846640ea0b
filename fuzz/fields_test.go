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
// map of fields after its fixed ones, must decode without panicking, to a
// record whose fields are all optional (even tags) in ascending order, or
// be refused; one that decodes encodes to bytes that decode to the same
// record and encode again to the same bytes. As a record: tags and values
// taken from the input, on an ack and on a put's item, must encode only
// when ascending and each one msgpack value, and then decode to the same
// record (optional tags), or be refused with ErrNewerField (a required
// one); byte for byte round trips either way.
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
	for _, fs := range recordFields(rec) {
		for i, f := range fs {
			if f.Required() {
				t.Fatalf("a %s record decoded with required field %d", state.TypeName(typ), f.Tag)
			}
			if i > 0 && f.Tag <= fs[i-1].Tag {
				t.Fatalf("a %s record decoded with fields out of order: %v", state.TypeName(typ), fs)
			}
		}
	}
	b, err := state.Encode(nil, rec)
	if err != nil {
		t.Fatalf("a decoded %s record does not encode: %v", state.TypeName(typ), err)
	}
	back, err := state.Decode(typ, b)
	if err != nil || !reflect.DeepEqual(back, rec) {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", rec, back, err)
	}
	again, err := state.Encode(nil, back)
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("encoding is not stable:\n  % x\n  % x", b, again)
	}
}

// recordFields are the fields of rec and of its items.
func recordFields(rec state.Record) []state.Fields {
	v := reflect.ValueOf(rec).Elem()
	out := []state.Fields{v.FieldByName("Ext").Interface().(state.Fields)}
	if p, ok := rec.(*state.Put); ok {
		for _, it := range p.Items {
			out = append(out, it.Ext)
		}
	}
	return out
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
	for _, rec := range []state.Record{
		&state.Ack{Time: 1, Receipt: 2, Ext: fs},
		&state.Put{Time: 1, Items: []state.NewItem{{Body: []byte("b"), Due: 1, Ext: fs[:half]}, {Due: 2}}, Ext: fs[half:]},
	} {
		b, err := state.Encode(nil, rec)
		if err != nil {
			continue // out of order, repeated, or not one value each
		}
		required := false
		for _, f := range fs {
			required = required || f.Required()
		}
		back, err := state.Decode(rec.Type(), b)
		switch {
		case required:
			if !errors.Is(err, state.ErrNewerField) {
				t.Fatalf("%+v with a required field decoded as %+v, %v; want ErrNewerField", rec, back, err)
			}
			continue
		case err != nil:
			t.Fatalf("%+v encodes to bytes that do not decode: %v", rec, err)
		}
		want := rec
		if p, ok := rec.(*state.Put); ok && len(p.Items[0].Ext) == 0 {
			p.Items[0].Ext = nil
		}
		if p, ok := rec.(*state.Put); ok && len(p.Ext) == 0 {
			p.Ext = nil
		}
		if a, ok := rec.(*state.Ack); ok && len(a.Ext) == 0 {
			a.Ext = nil
		}
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("decode(encode(%+v)) = %+v", want, back)
		}
		again, err := state.Encode(nil, back)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%+v: not byte for byte: %v", rec, err)
		}
	}
}
