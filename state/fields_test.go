package state

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// mp is the msgpack encoding of v by the reference library.
func mp(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// recordsWithFields is one record of every type, each with optional tagged
// fields (and a put's items with their own), as a newer walq might write
// them.
func recordsWithFields(t *testing.T) []Record {
	opt := Fields{{Tag: 2, Value: mp(t, "trace-id=4bf92f3577b34da6")}, {Tag: 40, Value: mp(t, map[string]any{"a": []any{1, "x", nil, true, 1.5}})}}
	one := Fields{{Tag: 1 << 40, Value: mp(t, []byte{0, 1, 2})}}
	settings := Settings{Visibility: 30e9, MaxAttempts: 5, KeyWindow: 60e9, MaxInFlight: 3}
	return []Record{
		&Put{Time: 1, Items: []NewItem{{Body: []byte("a"), Due: 1, Key: "k", Ext: opt}, {Body: []byte("b"), Due: 2}}, Ext: one},
		&Lease{Time: 2, ID: 1, LeaseEnd: 9, Ext: opt},
		&Extend{Time: 3, Receipt: 2, LeaseEnd: 10, Ext: one},
		&Ack{Time: 4, Receipt: 2, Ext: opt},
		&End{Kind: TypeNack, Time: 5, Receipt: 2, Cause: "boom", Due: 7, Ext: opt},
		&End{Kind: TypeExpire, Time: 5, Receipt: 2, Due: 7, Ext: one},
		&End{Kind: TypeDeadLetter, Time: 5, Receipt: 2, Cause: "x", Dead: true, Ext: opt},
		&Discard{Time: 6, IDs: []uint64{1}, Ext: one},
		&Redrive{Time: 7, IDs: []uint64{1, 2}, Ext: opt},
		&Purge{Time: 8, All: true, Ext: one},
		&Delete{Time: 9, IDs: []uint64{3}, Ext: opt},
		&CreateQueue{Time: 10, Name: "jobs", Settings: settings, Ext: opt},
		&SetQueue{Time: 11, Settings: settings, Ext: one},
		&PauseQueue{Time: 12, Until: 99, Ext: opt},
		&DeleteQueue{Time: 13, Force: true, Ext: one},
		&Move{Time: 14, Target: 11, IDs: []uint64{4}, Ext: opt},
		&Relocate{Time: 15, Items: []Relocated{{ID: 1, Body: []byte("a")}}, Ext: one},
	}
}

// TestOptionalFieldsRoundTrip: every record, and a put's items, may carry
// optional tagged fields (even tags) this build does not know: the record
// decodes as if they were not there, keeps them, and encodes again to the
// same bytes; any msgpack reader sees them as the array's last element, a
// map. A record without fields encodes exactly as before there were any.
func TestOptionalFieldsRoundTrip(t *testing.T) {
	for _, rec := range recordsWithFields(t) {
		b, err := Encode(nil, rec)
		if err != nil {
			t.Fatalf("%T: %v", rec, err)
		}
		back, err := Decode(rec.Type(), b)
		if err != nil {
			t.Fatalf("%s: %v", TypeName(rec.Type()), err)
		}
		again, err := Encode(nil, back)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%s: encode(decode(b)) differs:\n  % x\n  % x", TypeName(rec.Type()), b, again)
		}
		if !reflect.DeepEqual(back, rec) {
			t.Fatalf("%s: decoded %#v, want %#v", TypeName(rec.Type()), back, rec)
		}
		var generic []any
		dec := msgpack.NewDecoder(bytes.NewReader(b))
		dec.SetMapDecoder(func(d *msgpack.Decoder) (any, error) { return d.DecodeUntypedMap() })
		if err := dec.Decode(&generic); err != nil {
			t.Fatalf("%s: msgpack cannot read it: %v", TypeName(rec.Type()), err)
		}
		if _, ok := generic[len(generic)-1].(map[any]any); !ok {
			if _, ok := generic[len(generic)-1].(map[string]any); !ok {
				t.Fatalf("%s: the last element is a %T, want a map", TypeName(rec.Type()), generic[len(generic)-1])
			}
		}
		// Without its fields the record is what it always was.
		plain := withoutFields(t, rec)
		pb, err := Encode(nil, plain)
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := Decode(rec.Type(), pb)
		if err != nil || !reflect.DeepEqual(decoded, plain) || bytes.Equal(pb, b) {
			t.Fatalf("%s: without fields: %v", TypeName(rec.Type()), err)
		}
	}
}

// withoutFields is a copy of rec with no tagged field anywhere.
func withoutFields(t *testing.T, rec Record) Record {
	t.Helper()
	b, _ := Encode(nil, rec)
	c, err := Decode(rec.Type(), b)
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(c).Elem()
	v.FieldByName("Ext").Set(reflect.Zero(v.FieldByName("Ext").Type()))
	if p, ok := c.(*Put); ok {
		for i := range p.Items {
			p.Items[i].Ext = nil
		}
	}
	return c
}

// TestRequiredFieldRefused: a required tagged field (odd tag) this build
// does not know makes the record fail with ErrNewerField, naming the tag,
// whether it is the record's or an item's; it is never skipped.
func TestRequiredFieldRefused(t *testing.T) {
	req := Fields{{Tag: 2, Value: mp(t, 1)}, {Tag: 7, Value: mp(t, "must understand")}}
	for _, rec := range []Record{
		&Ack{Time: 4, Receipt: 2, Ext: req},
		&Put{Time: 1, Items: []NewItem{{Body: []byte("a"), Ext: req}}},
		&End{Kind: TypeNack, Time: 5, Receipt: 2, Ext: Fields{{Tag: 1, Value: mp(t, 0)}}},
		&SetQueue{Time: 11, Ext: req},
	} {
		b, err := Encode(nil, rec)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Decode(rec.Type(), b)
		if !errors.Is(err, ErrNewerField) || !strings.Contains(err.Error(), "tag ") {
			t.Fatalf("%s with a required field: %v, want ErrNewerField naming the tag", TypeName(rec.Type()), err)
		}
	}
}

// TestFieldsEncodedOneWay: a map of tagged fields is canonical: tags
// ascending and each once, never empty, each value one msgpack value. The
// encoder refuses fields that break it, and the decoder refuses the bytes.
func TestFieldsEncodedOneWay(t *testing.T) {
	for _, bad := range []Fields{
		{{Tag: 4, Value: mp(t, 1)}, {Tag: 2, Value: mp(t, 1)}},
		{{Tag: 2, Value: mp(t, 1)}, {Tag: 2, Value: mp(t, 1)}},
		{{Tag: 2, Value: nil}},
		{{Tag: 2, Value: append(mp(t, 1), mp(t, 2)...)}},
		{{Tag: 2, Value: []byte{0xc1}}},
	} {
		if _, err := Encode(nil, &Ack{Time: 1, Receipt: 2, Ext: bad}); err == nil {
			t.Fatalf("fields %v encoded", bad)
		}
	}
	ack := func(fields ...byte) []byte { return append([]byte{0x93, 0x01, 0x02}, fields...) }
	for name, b := range map[string][]byte{
		"empty map":       ack(0x80),
		"tags descending": ack(0x82, 0x04, 0xc0, 0x02, 0xc0),
		"tag repeated":    ack(0x82, 0x02, 0xc0, 0x02, 0xc0),
		"not a map":       ack(0x91, 0x02),
		"a string tag":    ack(0x81, 0xa1, 'x', 0xc0),
		"value cut short": ack(0x81, 0x02, 0xa5, 'x'),
		"nested too deep": ack(append([]byte{0x81, 0x02}, bytes.Repeat([]byte{0x91}, maxFieldDepth+2)...)...),
		"two more fields": append(ack(0x81, 0x02, 0xc0), 0xc0),
	} {
		if name == "two more fields" {
			b[0] = 0x94
		}
		if _, err := Decode(TypeAck, b); err == nil || errors.Is(err, ErrNewerField) {
			t.Fatalf("%s: Decode = %v, want a refusal that is not ErrNewerField", name, err)
		}
	}
}
