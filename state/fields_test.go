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

// fielded is a record with the tagged fields a newer walq might write on
// it and on its items.
type fielded struct {
	rec    Record
	fields Fields
	items  []Fields
}

// recordsWithFields is one record of every type, each with optional
// tagged fields (and a put's items with their own).
func recordsWithFields(t *testing.T) []fielded {
	opt := Fields{{Tag: 2, Value: mp(t, "trace-id=4bf92f3577b34da6")}, {Tag: 40, Value: mp(t, map[string]any{"a": []any{1, "x", nil, true, 1.5}})}}
	one := Fields{{Tag: 1 << 40, Value: mp(t, []byte{0, 1, 2})}}
	settings := Settings{Visibility: 30e9, MaxAttempts: 5, KeyWindow: 60e9, MaxInFlight: 3}
	return []fielded{
		{&Put{Time: 1, Items: []NewItem{{Body: []byte("a"), Due: 1, Key: "k"}, {Body: []byte("b"), Due: 2}}}, one, []Fields{opt}},
		{&Put{Time: 1, Items: []NewItem{{Body: []byte("a"), Due: 1, Key: "k"}, {Body: []byte("b"), Due: 2}}}, nil, []Fields{nil, one}},
		{&Lease{Time: 2, ID: 1, LeaseEnd: 9}, opt, nil},
		{&Extend{Time: 3, Receipt: 2, LeaseEnd: 10}, one, nil},
		{&Ack{Time: 4, Receipt: 2}, opt, nil},
		{&End{Kind: TypeNack, Time: 5, Receipt: 2, Cause: "boom", Due: 7}, opt, nil},
		{&End{Kind: TypeExpire, Time: 5, Receipt: 2, Due: 7}, one, nil},
		{&End{Kind: TypeDeadLetter, Time: 5, Receipt: 2, Cause: "x", Dead: true}, opt, nil},
		{&Discard{Time: 6, IDs: []uint64{1}}, one, nil},
		{&Redrive{Time: 7, IDs: []uint64{1, 2}}, opt, nil},
		{&Purge{Time: 8, All: true}, one, nil},
		{&Delete{Time: 9, IDs: []uint64{3}}, opt, nil},
		{&CreateQueue{Time: 10, Name: "jobs", Settings: settings}, opt, nil},
		{&SetQueue{Time: 11, Settings: settings}, one, nil},
		{&PauseQueue{Time: 12, Until: 99}, opt, nil},
		{&DeleteQueue{Time: 13, Force: true}, one, nil},
		{&Move{Time: 14, Target: 11, IDs: []uint64{4}}, opt, nil},
		{&Relocate{Time: 15, Items: []Relocated{{ID: 1, Body: []byte("a")}}}, one, nil},
	}
}

// TestOptionalFieldsSkipped: every record, and a put's items, may carry
// optional tagged fields (even tags) this build does not know: the record
// decodes as it would without them (and so encodes to the bytes it always
// had), and any msgpack reader sees them as the array's last element, a
// map. A record without fields encodes exactly as before there were any.
func TestOptionalFieldsSkipped(t *testing.T) {
	for _, tc := range recordsWithFields(t) {
		name := TypeName(tc.rec.Type())
		plain, err := Encode(nil, tc.rec)
		if err != nil {
			t.Fatal(err)
		}
		b, err := EncodeWithFields(nil, tc.rec, tc.fields, tc.items)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if bytes.Equal(b, plain) {
			t.Fatalf("%s: the fields were not written", name)
		}
		if none, _ := EncodeWithFields(nil, tc.rec, nil, nil); !bytes.Equal(none, plain) {
			t.Fatalf("%s: no fields, other bytes", name)
		}
		back, err := Decode(tc.rec.Type(), b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fromPlain, err := Decode(tc.rec.Type(), plain)
		if p, ok := back.(*Put); ok {
			// Fields before a body move it: its offset must still find it.
			for i := range p.Items {
				it := &p.Items[i]
				if !bytes.Equal(b[it.BodyOffset:it.BodyOffset+len(it.Body)], it.Body) {
					t.Fatalf("put item %d: offset %d does not find its body", i, it.BodyOffset)
				}
				it.BodyOffset = fromPlain.(*Put).Items[i].BodyOffset
			}
		}
		if err != nil || !reflect.DeepEqual(back, fromPlain) {
			t.Fatalf("%s: decoded %#v, want %#v (%v)", name, back, fromPlain, err)
		}
		if again, err := Encode(nil, back); err != nil || !bytes.Equal(again, plain) {
			t.Fatalf("%s: the decoded record encodes to other bytes than the plain one", name)
		}
		var generic []any
		dec := msgpack.NewDecoder(bytes.NewReader(b))
		dec.SetMapDecoder(func(d *msgpack.Decoder) (any, error) { return d.DecodeUntypedMap() })
		if err := dec.Decode(&generic); err != nil {
			t.Fatalf("%s: msgpack cannot read it: %v", name, err)
		}
		if tc.fields != nil {
			if _, ok := generic[len(generic)-1].(map[any]any); !ok {
				t.Fatalf("%s: the last element is a %T, want a map", name, generic[len(generic)-1])
			}
		}
	}
}

// TestRequiredFieldRefused: a required tagged field (odd tag) this build
// does not know makes the record fail with ErrNewerField, naming the tag,
// whether it is the record's or an item's; it is never skipped.
func TestRequiredFieldRefused(t *testing.T) {
	req := Fields{{Tag: 2, Value: mp(t, 1)}, {Tag: 7, Value: mp(t, "must understand")}}
	for _, tc := range []fielded{
		{&Ack{Time: 4, Receipt: 2}, req, nil},
		{&Put{Time: 1, Items: []NewItem{{Body: []byte("a")}, {Body: []byte("b")}}}, nil, []Fields{nil, req}},
		{&End{Kind: TypeNack, Time: 5, Receipt: 2}, Fields{{Tag: 1, Value: mp(t, 0)}}, nil},
		{&SetQueue{Time: 11}, req, nil},
	} {
		b, err := EncodeWithFields(nil, tc.rec, tc.fields, tc.items)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Decode(tc.rec.Type(), b)
		if !errors.Is(err, ErrNewerField) || !strings.Contains(err.Error(), "tag 7") && !strings.Contains(err.Error(), "tag 1") {
			t.Fatalf("%s with a required field: %v, want ErrNewerField naming the tag", TypeName(tc.rec.Type()), err)
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
		if _, err := EncodeWithFields(nil, &Ack{Time: 1, Receipt: 2}, bad, nil); err == nil {
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

// TestFieldsCanonical: a map of tagged fields has one encoding: a tag in a
// longer or signed form, or a map header longer than it needs, is refused
// (as damage, not as newer), and so is a value nested deeper than 32.
func TestFieldsCanonical(t *testing.T) {
	ack := func(fields ...byte) []byte { return append([]byte{0x93, 0x01, 0x02}, fields...) }
	for name, b := range map[string][]byte{
		"map16 for one field": ack(0xde, 0x00, 0x01, 0x02, 0xc3),
		"tag as uint8":        ack(0x81, 0xcc, 0x02, 0xc3),
		"tag as int8":         ack(0x81, 0xd0, 0x02, 0xc3),
		"required tag signed": ack(0x81, 0xd0, 0x03, 0xc3),
		"negative tag":        ack(0x81, 0xff, 0xc3),
		"nested 33 deep":      ack(append(append([]byte{0x81, 0x02}, bytes.Repeat([]byte{0x91}, 33)...), 0xc0)...),
	} {
		if _, err := Decode(TypeAck, b); err == nil || errors.Is(err, ErrNewerField) {
			t.Errorf("%s: Decode = %v, want a refusal that is not ErrNewerField", name, err)
		}
	}
	if _, err := Decode(TypeAck, ack(append(append([]byte{0x81, 0x02}, bytes.Repeat([]byte{0x91}, 32)...), 0xc0)...)); err != nil {
		t.Errorf("nested 32 deep: %v", err)
	}
}

// TestPutItemCount: a put's items are counted without decoding them, so a
// put whose items carry a required field this build does not know counts
// too (walq-inspect numbers the items of covered puts by it).
func TestPutItemCount(t *testing.T) {
	rec := &Put{Time: 1, Items: []NewItem{{Body: []byte("a")}, {Body: []byte("b")}, {Body: []byte("c")}}}
	b, err := EncodeWithFields(nil, rec, Fields{{Tag: 2, Value: []byte{0xc0}}}, []Fields{nil, {{Tag: 3, Value: []byte{0xc3}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(TypePut, b); !errors.Is(err, ErrNewerField) {
		t.Fatalf("Decode = %v, want ErrNewerField", err)
	}
	if n, err := PutItemCount(b); n != 3 || err != nil {
		t.Fatalf("PutItemCount = %d, %v; want 3", n, err)
	}
	if _, err := PutItemCount([]byte{0x92}); err == nil {
		t.Fatal("a cut put counted")
	}
}
