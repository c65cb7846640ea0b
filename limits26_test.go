package walq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestReceiptOfADeletedIncarnation: a receipt of a queue that was deleted,
// used on the queue created again under its name, is ErrQueueDeleted, as
// the documentation of Delete says (it was ErrInvalid).
func TestReceiptOfADeletedIncarnation(t *testing.T) {
	ctx := context.Background()
	d, _, _ := testQueue(t, Options{})
	old := mustOpenQueue(t, d, "jobs", QueueOptions{})
	mustPut(t, old, "x")
	m, err := old.Get(ctx)
	must(t, err)
	must(t, old.Delete(true))
	jobs := mustOpenQueue(t, d, "jobs", QueueOptions{})
	for name, call := range map[string]func() error{
		"Ack":        func() error { return jobs.Ack(m.Receipt) },
		"Nack":       func() error { return jobs.Nack(m.Receipt, nil) },
		"Extend":     func() error { return jobs.Extend(m.Receipt, 1) },
		"DeadLetter": func() error { return jobs.DeadLetter(m.Receipt, nil) },
	} {
		if err := call(); !errors.Is(err, ErrQueueDeleted) {
			t.Errorf("%s with a receipt of the deleted incarnation: %v, want ErrQueueDeleted", name, err)
		}
	}
	// A receipt of another live queue stays ErrInvalid.
	other := mustOpenQueue(t, d, "other", QueueOptions{})
	mustPut(t, other, "y")
	m2, err := other.Get(ctx)
	must(t, err)
	if err := jobs.Ack(m2.Receipt); !errors.Is(err, ErrInvalid) {
		t.Errorf("Ack with a receipt of another live queue: %v, want ErrInvalid", err)
	}
}

// TestLastErrorCutAtARune: a cause longer than the limit is cut before a
// rune, never inside one.
func TestLastErrorCutAtARune(t *testing.T) {
	ctx := context.Background()
	q, _, _ := testQueue(t, Options{MaxAttempts: 1})
	mustPut(t, q, "x")
	m, err := q.Get(ctx)
	must(t, err)
	cause := strings.Repeat("a", maxCause-1) + "é and more"
	must(t, q.Nack(m.Receipt, errors.New(cause)))
	dl := q.DeadLetters(0)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters", len(dl))
	}
	if got := dl[0].LastError; !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || len(got) > maxCause+len("…") {
		t.Fatalf("LastError cut to %d bytes, valid UTF-8 %v, ends %q", len(got), utf8.ValidString(got), got[max(0, len(got)-8):])
	}
}

// TestTooManyIDs: a call naming more than MaxIDs items is ErrTooLarge and
// changes nothing; the queue goes on.
func TestTooManyIDs(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	d := mustOpenQueue(t, q, "d", QueueOptions{})
	id := mustPut(t, q, "x")
	ids := make([]uint64, MaxIDs+1) // refused on their number, before any is looked at
	for name, call := range map[string]func() error{
		"DeleteItems":      func() error { return q.DeleteItems(ids...) },
		"Redrive":          func() error { return q.Redrive(ids...) },
		"PurgeDeadLetters": func() error { return q.PurgeDeadLetters(ids...) },
		"RedriveTo":        func() error { return q.RedriveTo(d, ids...) },
	} {
		if err := call(); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s of %d IDs: %v, want ErrTooLarge", name, len(ids), err)
		}
	}
	if st := q.Stats(); st.Items != 1 {
		t.Fatalf("%d items after refused calls", st.Items)
	}
	must(t, q.DeleteItems(id))
}
