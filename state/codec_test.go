package state

import (
	"bytes"
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestRecordsAreMsgpack: the hand-written encoding is plain msgpack, so any
// msgpack library reads it; here the reference library decodes each record
// into generic values that must match the fields.
func TestRecordsAreMsgpack(t *testing.T) {
	big := bytes.Repeat([]byte("walq"), 17500)
	cases := []struct {
		rec  Record
		want []any
	}{
		{&Lease{Time: math.MinInt64, ID: math.MaxUint64, LeaseEnd: -1},
			[]any{int64(math.MinInt64), uint64(math.MaxUint64), int64(-1)}},
		{&Ack{Time: 1 << 40, Receipt: 300}, []any{int64(1 << 40), uint64(300)}},
		{&End{Kind: TypeNack, Time: 5, Receipt: 6, Cause: "boom", Due: -200, Dead: true},
			[]any{uint64(TypeNack), int64(5), uint64(6), "boom", int64(-200), true}},
		{&Purge{Time: 9, IDs: []uint64{1, 70000}, All: false},
			[]any{int64(9), []any{uint64(1), uint64(70000)}, false}},
		{&Put{Time: 2, Items: []NewItem{{Body: big, Due: -40000, Deadline: 1 << 33, Priority: -129, Key: string(big[:300])}}},
			[]any{int64(2), []any{[]any{big, int64(-40000), int64(1 << 33), int64(-129), string(big[:300])}}}},
	}
	for _, tc := range cases {
		b, err := Encode(nil, tc.rec)
		if err != nil {
			t.Fatal(err)
		}
		var got []any
		dec := msgpack.NewDecoder(bytes.NewReader(b))
		dec.UseLooseInterfaceDecoding(true)
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("%T: msgpack cannot read it: %v", tc.rec, err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(tc.want)) {
			t.Fatalf("%T: msgpack reads %.300v, want %.300v", tc.rec, got, tc.want)
		}
		back, err := Decode(tc.rec.Type(), b)
		if err != nil || !reflect.DeepEqual(back, tc.rec) {
			t.Fatalf("%T: round trip = %#v, %v", tc.rec, back, err)
		}
	}
}

// normalize maps every integer to int64 or uint64 as loose decoding does.
func normalize(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = normalize(x[i])
		}
		return out
	case []byte:
		return string(x) // the reference library reads bin into either
	case int64:
		if x >= 0 {
			return uint64(x)
		}
		return x
	}
	return v
}

// TestDecodeRejectsTrailingAndTruncated: a body must be exactly one record.
func TestDecodeRejectsTrailingAndTruncated(t *testing.T) {
	b, _ := Encode(nil, &End{Kind: TypeExpire, Time: 1, Receipt: 2, Cause: "x", Due: 3})
	if _, err := Decode(TypeExpire, append(b, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	for n := 0; n < len(b); n++ {
		if _, err := Decode(TypeExpire, b[:n]); err == nil {
			t.Fatalf("truncated to %d bytes accepted", n)
		}
	}
	if _, err := Decode(TypeNack, b); err == nil {
		t.Fatal("an expire body accepted as a nack")
	}
}

func BenchmarkEncodeDecodeLease(b *testing.B) {
	rec := &Lease{Time: 1767323050082000000, ID: 123456, LeaseEnd: 1767323080082000000}
	var buf []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf, _ = Encode(buf[:0], rec)
		if _, err := Decode(TypeLease, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeDecodePut is a put of 16 items of 128 bytes, some keyed,
// through the codec and back (as the sequencer encodes and replay decodes).
func BenchmarkEncodeDecodePut(b *testing.B) {
	rec := &Put{Time: 1767323050082000000}
	body := bytes.Repeat([]byte("x"), 128)
	for i := range 16 {
		it := NewItem{Body: body, Due: rec.Time, Priority: int64(i % 3)}
		if i%4 == 0 {
			it.Key = "order-12345678"
		}
		rec.Items = append(rec.Items, it)
	}
	var buf []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf, _ = Encode(buf[:0], rec)
		if _, err := DecodeAlias(TypePut, buf); err != nil {
			b.Fatal(err)
		}
	}
}
