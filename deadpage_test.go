package walq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// deadLettersOf puts bodies into q and dead-letters each (MaxAttempts 1),
// returning their IDs in the order they died.
func deadLettersOf(t *testing.T, q *Queue, bodies ...[]byte) []uint64 {
	t.Helper()
	items := make([]Item, len(bodies))
	for i, b := range bodies {
		items[i] = Item{Body: b}
	}
	if _, err := q.PutBatch(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for range bodies {
		m := mustTryGet(t, q)
		if err := q.Nack(m.Receipt, errors.New("no")); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

// TestDeadLetterPage: the dead-letter list read page by page returns each
// letter once, in order, with its body; a letter redriven between pages is
// not returned, one dead-lettered meanwhile comes last; and a page of
// large bodies ends once past DeadLetterPageBytes.
func TestDeadLetterPage(t *testing.T) {
	q, _, _ := testQueue(t, Options{Sync: SyncNever, MaxAttempts: 1})
	bodies := make([][]byte, 250)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, "letter %d", i)
	}
	ids := deadLettersOf(t, q, bodies...)
	bodyOf := make(map[uint64][]byte)
	for i, id := range ids {
		bodyOf[id] = bodies[i]
	}

	var got []uint64
	var cur DeadLetterCursor
	for page := 0; ; page++ {
		letters, next := q.DeadLetterPage(cur, 100)
		if len(letters) == 0 {
			if next != cur {
				t.Fatalf("an empty page moved the cursor")
			}
			break
		}
		if want := min(100, 250-len(got)); len(letters) != want && page < 3 {
			t.Fatalf("page %d holds %d letters, want %d", page, len(letters), want)
		}
		for _, d := range letters {
			got = append(got, d.ID)
			if !bytes.Equal(d.Body, bodyOf[d.ID]) {
				t.Fatalf("letter %d: body %q, want %q", d.ID, d.Body, bodyOf[d.ID])
			}
		}
		if page == 0 {
			// Between pages: one letter of the next page redriven, one
			// more dead-lettered.
			if err := q.Redrive(ids[150]); err != nil {
				t.Fatal(err)
			}
			m := mustTryGet(t, q)
			if err := q.Nack(m.Receipt, errors.New("again")); err != nil {
				t.Fatal(err)
			}
		}
		cur = next
	}
	want := append(append(append([]uint64(nil), ids[:150]...), ids[151:]...), ids[150])
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("paged %d letters %v\nwant %d %v", len(got), got, len(want), want)
	}

	// Large bodies: a page ends after the letter that takes it past
	// DeadLetterPageBytes.
	big := bytes.Repeat([]byte("b"), 1<<20)
	large := mustOpenQueue(t, q, "large", QueueOptions{MaxAttempts: 1})
	deadLettersOf(t, large, big, big, big, big, big, big)
	letters, _ := large.DeadLetterPage(DeadLetterCursor{}, 100)
	if n := len(letters); n != DeadLetterPageBytes>>20 {
		t.Fatalf("a page of 1 MiB bodies holds %d letters, want %d", n, DeadLetterPageBytes>>20)
	}
}
