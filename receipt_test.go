package walq

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

func TestReceiptText(t *testing.T) {
	dir := wal.DirID{0x9f, 0x86, 0xd0, 0x81, 0x88, 0x4c, 0x7d, 0x65, 0x9a, 0x2f, 0xea, 0xa0, 0xc5, 0x5a, 0xd0, 0x15}
	for _, tt := range []struct {
		r    Receipt
		text string
	}{
		{Receipt{dir: dir, lease: 0x1c}, "9f86d081884c7d659a2feaa0c55ad015-0-1c"},
		{Receipt{lease: 1}, "00000000000000000000000000000000-0-1"},
		{Receipt{dir: dir, queue: 0xab, lease: math.MaxUint64}, "9f86d081884c7d659a2feaa0c55ad015-ab-ffffffffffffffff"},
		{Receipt{dir: wal.DirID{0: 0xff, 15: 0xff}, queue: math.MaxUint64, lease: 0x10}, "ff0000000000000000000000000000ff-ffffffffffffffff-10"},
	} {
		if got := tt.r.String(); got != tt.text {
			t.Errorf("String() = %q, want %q", got, tt.text)
		}
		b, err := tt.r.MarshalText()
		if err != nil || string(b) != tt.text {
			t.Errorf("MarshalText() = %q, %v; want %q", b, err, tt.text)
		}
		b, err = tt.r.AppendText([]byte("x:"))
		if err != nil || string(b) != "x:"+tt.text {
			t.Errorf("AppendText(x:) = %q, %v", b, err)
		}
		if len(tt.text) > receiptTextMax {
			t.Errorf("%q is longer than receiptTextMax %d", tt.text, receiptTextMax)
		}
		r, err := ParseReceipt(tt.text)
		if err != nil || r != tt.r {
			t.Errorf("ParseReceipt(%q) = %#v, %v; want %#v", tt.text, r, err, tt.r)
		}
		var u Receipt
		if err := u.UnmarshalText([]byte(tt.text)); err != nil || u != tt.r {
			t.Errorf("UnmarshalText(%q) = %#v, %v", tt.text, u, err)
		}
	}

	// The zero Receipt: empty text, both ways; ParseReceipt refuses it.
	var zero Receipt
	if !zero.IsZero() || zero.String() != "invalid receipt" {
		t.Errorf("zero Receipt: IsZero %v, String %q", zero.IsZero(), zero.String())
	}
	if b, err := zero.MarshalText(); err != nil || len(b) != 0 {
		t.Errorf("zero MarshalText() = %q, %v", b, err)
	}
	r := Receipt{dir: dir, lease: 5}
	if err := r.UnmarshalText(nil); err != nil || !r.IsZero() {
		t.Errorf("UnmarshalText(empty) = %#v, %v; want the zero Receipt", r, err)
	}
	if _, err := ParseReceipt(""); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseReceipt(\"\") = %v, want ErrInvalid", err)
	}

	// In JSON a receipt is its text; the zero Receipt is "".
	type wire struct{ R, Z Receipt }
	b, err := json.Marshal(wire{R: Receipt{dir: dir, lease: 0x1c}})
	if err != nil || string(b) != `{"R":"9f86d081884c7d659a2feaa0c55ad015-0-1c","Z":""}` {
		t.Fatalf("json.Marshal = %s, %v", b, err)
	}
	var w wire
	if err := json.Unmarshal(b, &w); err != nil || w.R != (Receipt{dir: dir, lease: 0x1c}) || !w.Z.IsZero() {
		t.Fatalf("json.Unmarshal(%s) = %+v, %v", b, w, err)
	}
	if err := json.Unmarshal([]byte(`{"R":"nonsense"}`), &w); !errors.Is(err, ErrInvalid) {
		t.Fatalf("json.Unmarshal of a bad receipt = %v, want ErrInvalid", err)
	}
}

func TestParseReceiptRefuses(t *testing.T) {
	const dir = "9f86d081884c7d659a2feaa0c55ad015"
	for _, tt := range []struct {
		text, why string
	}{
		{"", "empty"},
		{"1c", "three fields"},
		{dir, "three fields"},
		{dir + "-1c", "three fields"},
		{dir + "-0-1c-", "lease field: '-' at offset 2"},
		{dir + "-0-1c-5", "lease field: '-' at offset 2"},
		{"-0-1c", "directory field has 0 characters"},
		{dir[:31] + "-0-1c", "directory field has 31 characters"},
		{dir + "0-0-1c", "directory field has 33 characters"},
		{strings.ToUpper(dir) + "-0-1c", "directory field: 'F' at offset 1 is not a lowercase hex digit"},
		{dir[:30] + "g5-0-1c", "directory field: 'g' at offset 30"},
		{dir + "--1c", "queue field: empty"},
		{dir + "-00-1c", "queue field: leading zero"},
		{dir + "-01-1c", "queue field: leading zero"},
		{dir + "-A-1c", "queue field: 'A' at offset 0"},
		{dir + "-+1-1c", "queue field: '+' at offset 0"},
		{dir + "-0x1-1c", "queue field: leading zero"},
		{dir + "-10000000000000000-1c", "queue field: 17 hex digits, at most 16"},
		{dir + "-0-", "lease field: empty"},
		{dir + "-0-0", "lease field is 0"},
		{dir + "-0-01c", "lease field: leading zero"},
		{dir + "-0-1C", "lease field: 'C' at offset 1"},
		{dir + "-0- 1c", "lease field: ' ' at offset 0"},
		{dir + "-0-1c\n", "lease field: '\\n' at offset 2"},
		{dir + "-0-10000000000000000", "lease field: 17 hex digits"},
		{" " + dir + "-0-1c", "directory field has 33 characters"},
	} {
		r, err := ParseReceipt(tt.text)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.why) || !r.IsZero() {
			t.Errorf("ParseReceipt(%q) = %#v, %v; want ErrInvalid saying %q", tt.text, r, err, tt.why)
			continue
		}
		prev := Receipt{lease: 7}
		u := prev
		if err := u.UnmarshalText([]byte(tt.text)); tt.text != "" && (!errors.Is(err, ErrInvalid) || u != prev) {
			t.Errorf("UnmarshalText(%q) = %v and changed the receipt to %#v", tt.text, err, u)
		}
	}
	// A long input is cut in the message.
	if _, err := ParseReceipt(strings.Repeat("a", 10000)); err == nil || len(err.Error()) > 400 {
		t.Errorf("ParseReceipt(10000 bytes) = %v", err)
	}
}

// FuzzParseReceipt: whatever parses is the text of its receipt (one text
// form per receipt); whatever does not is ErrInvalid.
func FuzzParseReceipt(f *testing.F) {
	f.Add("9f86d081884c7d659a2feaa0c55ad015-0-1c")
	f.Add("00000000000000000000000000000000-0-1")
	f.Add("ffffffffffffffffffffffffffffffff-ffffffffffffffff-ffffffffffffffff")
	f.Add("9f86d081884c7d659a2feaa0c55ad015-00-1c")
	f.Add("9f86d081884c7d659a2feaa0c55ad015-0-0")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseReceipt(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !r.IsZero() {
				t.Fatalf("ParseReceipt(%q) = %#v, %v", s, r, err)
			}
			return
		}
		if r.IsZero() || r.lease == 0 || r.String() != s {
			t.Fatalf("ParseReceipt(%q) = %#v, which prints as %q", s, r, r.String())
		}
		var u Receipt
		if err := u.UnmarshalText([]byte(s)); err != nil || u != r {
			t.Fatalf("UnmarshalText(%q) = %#v, %v", s, u, err)
		}
	})
}

// A receipt a queue hands out carries the queue's directory and acts again
// after a trip through its text form.
func TestReceiptOfQueue(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	if q.dirID.IsZero() || q.dirID != dirIDOf(t, q.dir) {
		t.Fatalf("queue directory id %s, marker %s", q.dirID, dirIDOf(t, q.dir))
	}
	mustPut(t, q, "a")
	m := mustTryGet(t, q)
	if m.Receipt.dir != q.dirID || m.Receipt.queue != state.DefaultQueue || m.Receipt.lease != q.Stats().LastLSN {
		t.Fatalf("receipt %#v: want directory %s, queue 0, lease %d", m.Receipt, q.dirID, q.Stats().LastLSN)
	}
	if want := q.dirID.String() + "-0-"; !strings.HasPrefix(m.Receipt.String(), want) {
		t.Fatalf("receipt %s does not start with %s", m.Receipt, want)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back Message
	if err := json.Unmarshal(b, &back); err != nil || back.Receipt != m.Receipt {
		t.Fatalf("Message through JSON: %s -> receipt %v, %v", b, back.Receipt, err)
	}
	r, err := ParseReceipt(m.Receipt.String())
	if err != nil {
		t.Fatal(err)
	}
	must(t, q.Extend(r, time.Minute))
	must(t, q.Ack(r))
	if err := q.Ack(r); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("second Ack = %v, want ErrLeaseLost", err)
	}
}

// A receipt from queue A used on queue B, in another directory, is refused
// by every call that takes a receipt, though B has an open lease at the
// same LSN: B writes nothing and changes nothing, and A's lease is still
// A's to end.
func TestReceiptFromAnotherDirectory(t *testing.T) {
	a, _, _ := testQueue(t, Options{})
	b, _, _ := testQueue(t, Options{})
	if a.dirID == b.dirID || a.dirID.IsZero() {
		t.Fatal("two random directory IDs are equal")
	}
	mustPut(t, a, "a's item")
	mustPut(t, b, "b's item")
	ma, mb := mustTryGet(t, a), mustTryGet(t, b)
	if ma.Receipt.lease != mb.Receipt.lease || ma.Receipt == mb.Receipt {
		t.Fatalf("receipts %v and %v: want the same lease LSN in two directories", ma.Receipt, mb.Receipt)
	}
	bEnd, _ := leaseEnd(b, mb.Receipt)
	bStats, bState := b.Stats(), b.stateBytes()
	aState := a.stateBytes()

	foreign := map[string]Receipt{
		"another directory's": ma.Receipt,
		"the zero":            {},
		"another queue's":     {dir: b.dirID, queue: 1, lease: mb.Receipt.lease},
	}
	for name, r := range foreign {
		calls := map[string]func() error{
			"Extend":     func() error { return b.Extend(r, time.Minute) },
			"Extend(0)":  func() error { return b.Extend(r, 0) },
			"Ack":        func() error { return b.Ack(r) },
			"Nack":       func() error { return b.Nack(r, errors.New("x")) },
			"DeadLetter": func() error { return b.DeadLetter(r, errors.New("x")) },
			"heartbeat":  func() error { return b.heartbeat(r, time.Minute) },
			"ackAndLease": func() error {
				next, ok, ackErr, err := b.ackAndLease(r)
				if err != nil || ok || next.ID != 0 {
					t.Errorf("ackAndLease of %s receipt = %+v, %v, %v, %v", name, next, ok, ackErr, err)
				}
				return ackErr
			},
		}
		for call, fn := range calls {
			err := fn()
			if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrLeaseLost) {
				t.Errorf("%s with %s receipt = %v, want ErrInvalid", call, name, err)
			}
		}
	}
	err := b.Ack(ma.Receipt)
	if msg := err.Error(); !strings.Contains(msg, a.dirID.String()) || !strings.Contains(msg, b.dirID.String()) {
		t.Errorf("error %q names not both directories", msg)
	}
	if err := b.Ack(Receipt{dir: b.dirID, queue: 1, lease: 2}); !strings.Contains(err.Error(), "queue incarnation 1") && !strings.Contains(err.Error(), "queue 1") {
		t.Errorf("error %q does not name the queue", err)
	}

	// B wrote nothing and changed nothing; no late ack was counted.
	if st := b.Stats(); st.LastLSN != bStats.LastLSN || st.LateAcks != 0 || st.Leased != 1 || st.Acked != 0 ||
		st.Nacked != 0 || st.DeadLettered != 0 {
		t.Fatalf("B after the foreign receipts: %+v\n  before: %+v", st, bStats)
	}
	if !bytes.Equal(b.stateBytes(), bState) {
		t.Fatal("B's state changed")
	}
	if end, ok := leaseEnd(b, mb.Receipt); !ok || !end.Equal(bEnd) {
		t.Fatalf("B's lease: end %v open %v, was %v", end, ok, bEnd)
	}
	// A's item is untouched and still A's to ack; B's is still B's.
	if !bytes.Equal(a.stateBytes(), aState) {
		t.Fatal("A's state changed")
	}
	must(t, a.Ack(ma.Receipt))
	must(t, b.Ack(mb.Receipt))
	if sa, sb := a.Stats(), b.Stats(); sa.Acked != 1 || sa.Items != 0 || sb.Acked != 1 || sb.Items != 0 {
		t.Fatalf("after the acks: A %+v, B %+v", sa, sb)
	}
	// A's receipt is now stale in A (ErrLeaseLost) and still foreign in B.
	if err := a.Ack(ma.Receipt); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("A: second ack = %v, want ErrLeaseLost", err)
	}
	if err := b.Ack(ma.Receipt); !errors.Is(err, ErrInvalid) {
		t.Fatalf("B: ack of A's receipt = %v, want ErrInvalid", err)
	}
}

// A receipt issued before a reopen names this directory still, so it is
// judged as any stale receipt: the lease ended at recovery (ErrLeaseLost),
// never refused as another directory's.
func TestReceiptAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	q, err := Open(dir, Options{})
	must(t, err)
	mustPut(t, q, "a")
	m := mustTryGet(t, q)
	must(t, q.Close())
	q, err = Open(dir, Options{})
	must(t, err)
	defer q.Close()
	if err := q.Ack(m.Receipt); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Ack with a receipt from before the reopen = %v, want ErrLeaseLost", err)
	}
}
