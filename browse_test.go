package walq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func pageIDs(p ItemPage) []uint64 {
	var ids []uint64
	for _, it := range p.Items {
		ids = append(ids, it.ID)
	}
	return ids
}

func TestListItemsKeysetPaging(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	other := mustOpenQueue(t, q, "other", QueueOptions{})
	for i := range 120 {
		mustPut(t, q, fmt.Sprintf("item %d", i))
		if i%10 == 0 {
			mustPut(t, other, "not this queue")
		}
	}
	var got []uint64
	var after uint64
	pages := 0
	for {
		p, err := q.ListItems(ListOptions{Filter: ItemFilter{State: "ready"}, After: after})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got = append(got, pageIDs(p)...)
		for _, it := range p.Items {
			if it.Queue != "" || it.State != "ready" {
				t.Fatalf("listed %+v", it)
			}
		}
		if p.Next == 0 {
			break
		}
		if len(p.Items) != defaultListLimit {
			t.Fatalf("page %d: %d items with more to come", pages, len(p.Items))
		}
		after = p.Next
	}
	if pages != 3 || len(got) != 120 || !slices.IsSorted(got) {
		t.Fatalf("%d pages, %d items, sorted %v", pages, len(got), slices.IsSorted(got))
	}

	// A page stays right while items before the cursor go: keyset, not
	// offsets.
	first, _ := q.ListItems(ListOptions{Filter: ItemFilter{State: "ready"}, Limit: 10})
	for range 5 {
		m := mustTryGet(t, q)
		if err := q.Ack(m.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	second, _ := q.ListItems(ListOptions{Filter: ItemFilter{State: "ready"}, Limit: 10, After: first.Next})
	if second.Items[0].ID != first.Items[9].ID+1 && second.Items[0].ID != first.Items[9].ID+2 {
		t.Fatalf("second page starts at %d after a first page ending at %d", second.Items[0].ID, first.Items[9].ID)
	}
	if slices.Contains(pageIDs(second), first.Items[9].ID) {
		t.Fatalf("second page repeats item %d", first.Items[9].ID)
	}
}

func TestListItemsBudget(t *testing.T) {
	q, _, _ := testQueue(t, Options{MaxAttempts: 1})
	for range 30 {
		mustPut(t, q, "x")
	}
	m := mustTryGet(t, q) // item 1 dies
	if err := q.Nack(m.Receipt, errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	last := mustPut(t, q, "y")
	m = mustTryGet(t, q) // item 2 dies too
	if err := q.Nack(m.Receipt, errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	// Dead letters are items 1 and 2; with a budget of 10 the walk stops
	// at item 10 and says so.
	p, err := q.ListItems(ListOptions{Filter: ItemFilter{State: "dead"}, Budget: 10, After: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pageIDs(p), []uint64{2}) || p.Next != 11 || p.Scanned != 10 || p.Stored != 31 {
		t.Fatalf("page %v next %d scanned %d stored %d; want [2] next 11 scanned 10 stored 31", pageIDs(p), p.Next, p.Scanned, p.Stored)
	}
	p, err = q.ListItems(ListOptions{Filter: ItemFilter{State: "dead"}, Budget: 100, After: p.Next})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 0 || p.Next != 0 || p.Scanned != int(last)-11 {
		t.Fatalf("rest: %v next %d scanned %d", pageIDs(p), p.Next, p.Scanned)
	}
}

func TestListItemsFilters(t *testing.T) {
	q, clock, _ := testQueue(t, Options{MaxAttempts: 1})
	a := mustPut(t, q, "alpha body", WithKey("k-a"))
	clock.Advance(time.Minute)
	t1 := clock.Now()
	b := mustPut(t, q, "beta body with needle")
	c := mustPut(t, q, "gamma", WithDelay(time.Hour))
	clock.Advance(time.Minute)
	t2 := clock.Now()
	d := mustPut(t, q, "delta")
	m := mustTryGet(t, q) // a
	if err := q.Nack(m.Receipt, errors.New("smtp: 550 mailbox full")); err != nil {
		t.Fatal(err)
	}
	leased := mustTryGet(t, q) // b
	tests := []struct {
		name string
		f    ItemFilter
		want []uint64
	}{
		{"all", ItemFilter{}, []uint64{a, b, c, d}},
		{"ready", ItemFilter{State: "ready"}, []uint64{d}},
		{"delayed", ItemFilter{State: "delayed"}, []uint64{c}},
		{"leased", ItemFilter{State: "leased"}, []uint64{leased.ID}},
		{"dead", ItemFilter{State: "dead"}, []uint64{a}},
		{"by ID", ItemFilter{ID: c}, []uint64{c}},
		{"by ID, other state", ItemFilter{ID: c, State: "ready"}, nil},
		{"by key", ItemFilter{Key: "k-a"}, []uint64{a}},
		{"by unknown key", ItemFilter{Key: "nope"}, nil},
		{"from", ItemFilter{From: t1}, []uint64{b, c, d}},
		{"to", ItemFilter{To: t1}, []uint64{a}},
		{"from to", ItemFilter{From: t1, To: t2}, []uint64{b, c}},
		{"error text", ItemFilter{Text: "mailbox full"}, []uint64{a}},
		{"text not in errors", ItemFilter{Text: "needle"}, nil},
		{"text in bodies", ItemFilter{Text: "needle", InBody: true}, []uint64{b}},
		{"body text and state", ItemFilter{Text: "body", InBody: true, State: "leased"}, []uint64{b}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := q.ListItems(ListOptions{Filter: tc.f})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(pageIDs(p), tc.want) {
				t.Fatalf("got %v, want %v", pageIDs(p), tc.want)
			}
		})
	}
	p, err := q.ListItems(ListOptions{Filter: ItemFilter{Text: "o", InBody: true}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Searched != 3 { // a's error has an "o": its body is not read
		t.Fatalf("searched %d bodies, want 3", p.Searched)
	}
	for name, f := range map[string]ItemFilter{
		"state":       {State: "acked"},
		"empty range": {From: t2, To: t1},
	} {
		if _, err := q.ListItems(ListOptions{Filter: f}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
}

func TestHeadInDeliveryOrder(t *testing.T) {
	q, clock, _ := testQueue(t, Options{})
	var want []uint64
	low := mustPut(t, q, "low", WithPriority(5))
	for i := range 5 {
		want = append(want, mustPut(t, q, fmt.Sprint(i), WithPriority(1)))
		clock.Advance(time.Millisecond)
	}
	urgent := mustPut(t, q, "urgent", WithPriority(-1))
	mustPut(t, q, "later", WithDelay(time.Hour))
	want = append([]uint64{urgent}, append(want, low)...)
	got, err := q.Head(100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, it := range got {
		ids = append(ids, it.ID)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("head %v, want %v", ids, want)
	}
	// The head is what Get delivers, in that order.
	for i, id := range want[:3] {
		if m := mustTryGet(t, q); m.ID != id {
			t.Fatalf("delivery %d is item %d; the head said %d", i, m.ID, id)
		}
	}
	got, _ = q.Head(2)
	if len(got) != 2 || got[0].ID != want[3] || got[1].ID != want[4] {
		t.Fatalf("head(2) after three deliveries: %+v", got)
	}
}

func TestItemAndBody(t *testing.T) {
	q, _, _ := testQueue(t, Options{MaxAttempts: 1})
	other := mustOpenQueue(t, q, "other", QueueOptions{})
	body := "\xff<script>alert(1)</script>"
	id := mustPut(t, q, body, WithKey("k"))
	foreign := mustPut(t, other, "x")
	m := mustTryGet(t, q)
	if err := q.Nack(m.Receipt, errors.New("bad")); err != nil {
		t.Fatal(err)
	}
	v, err := q.Item(id)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != "dead" || v.Key != "k" || v.LastError != "bad" || v.BodyLen != len(body) || len(v.History) != 1 || v.EndedAt.IsZero() {
		t.Fatalf("item %+v", v)
	}
	b, err := q.ItemBody(id)
	if err != nil || string(b) != body {
		t.Fatalf("body %q, %v", b, err)
	}
	for _, id := range []uint64{foreign, 999} {
		if _, err := q.Item(id); !errors.Is(err, ErrNoItem) {
			t.Errorf("Item(%d) = %v, want ErrNoItem", id, err)
		}
		if _, err := q.ItemBody(id); !errors.Is(err, ErrNoItem) {
			t.Errorf("ItemBody(%d) = %v, want ErrNoItem", id, err)
		}
	}
}

func TestStatsNowCountsDueItemsReady(t *testing.T) {
	q, clock, _ := testQueue(t, Options{})
	mustPut(t, q, "now")
	mustPut(t, q, "later", WithDelay(time.Minute))
	if st := q.StatsNow(); st.Ready != 1 || st.Delayed != 1 {
		t.Fatalf("ready %d delayed %d, want 1 and 1", st.Ready, st.Delayed)
	}
	clock.Advance(time.Minute)
	if st := q.StatsNow(); st.Ready != 2 || st.Delayed != 0 {
		t.Fatalf("a minute later: ready %d delayed %d, want 2 and 0", st.Ready, st.Delayed)
	}
}

func TestSmallQueueInABigDirectory(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	small := mustOpenQueue(t, q, "small", QueueOptions{})
	a := mustPut(t, small, "a")
	items := make([]Item, 5000)
	for i := range items {
		items[i].Body = []byte("x")
	}
	if _, err := q.PutBatch(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	b := mustPut(t, small, "b", WithPriority(-1))
	head, err := small.Head(MaxHead)
	if err != nil {
		t.Fatal(err)
	}
	if len(head) != 2 || head[0].ID != b || head[1].ID != a {
		t.Fatalf("head of the small queue: %+v", head)
	}
	p, err := small.ListItems(ListOptions{Filter: ItemFilter{State: "dead"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 0 || p.Next != 0 || p.Scanned != 0 {
		t.Fatalf("dead letters of a queue with none: %d items, next %d, scanned %d; want none, 0, 0", len(p.Items), p.Next, p.Scanned)
	}
}

func TestLateQueueWalksFromItsCreation(t *testing.T) {
	q, clock, _ := testQueue(t, Options{MaxAttempts: 1})
	items := make([]Item, 3000)
	for i := range items {
		items[i].Body = []byte("x")
	}
	if _, err := q.PutBatch(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Millisecond)
	late := mustOpenQueue(t, q, "late", QueueOptions{})
	mustPut(t, late, "l1")
	mustPut(t, late, "l2")
	p, err := late.ListItems(ListOptions{Filter: ItemFilter{State: "ready"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 2 || p.Scanned != 2 || p.Next != 0 {
		t.Fatalf("late queue: %d items, scanned %d, next %d; want 2, 2, 0", len(p.Items), p.Scanned, p.Next)
	}
	// A dead letter moved in keeps its older ID: the walk starts from the
	// first item again, and finds it.
	m := mustTryGet(t, q)
	if err := q.Nack(m.Receipt, errors.New("x")); err != nil {
		t.Fatal(err)
	}
	if err := q.RedriveTo(late, m.ID); err != nil {
		t.Fatal(err)
	}
	p, err = late.ListItems(ListOptions{Filter: ItemFilter{State: "ready"}})
	if err != nil {
		t.Fatal(err)
	}
	if ids := pageIDs(p); len(ids) != 3 || ids[0] != m.ID {
		t.Fatalf("after a move: %v, want the moved item %d first", ids, m.ID)
	}
	head, err := late.Head(10)
	if err != nil || len(head) != 3 || head[2].ID != m.ID {
		t.Fatalf("head after a move: %+v %v", head, err)
	}
}

func TestActivityFromTheLog(t *testing.T) {
	q, clock, _ := testQueue(t, Options{MaxAttempts: 1})
	other := mustOpenQueue(t, q, "other", QueueOptions{})
	start := clock.Now().Truncate(time.Minute)
	mustPut(t, q, "a")
	mustPut(t, other, "not this queue")
	clock.Advance(time.Minute)
	if _, err := q.PutBatch(context.Background(), []Item{{Body: []byte("b")}, {Body: []byte("c")}}); err != nil {
		t.Fatal(err)
	}
	m := mustTryGet(t, q)
	if err := q.Ack(m.Receipt); err != nil {
		t.Fatal(err)
	}
	m = mustTryGet(t, q)
	if err := q.Nack(m.Receipt, errors.New("x")); err != nil {
		t.Fatal(err)
	}
	got, err := q.Activity(start)
	if err != nil {
		t.Fatal(err)
	}
	want := []ActivityMinute{{Start: start, Put: 1}, {Start: start.Add(time.Minute), Put: 2, Acked: 1, Failed: 1}}
	if len(got) != len(want) {
		t.Fatalf("activity %+v, want %+v", got, want)
	}
	for i := range got {
		if !got[i].Start.Equal(want[i].Start) || got[i].Put != want[i].Put || got[i].Acked != want[i].Acked || got[i].Failed != want[i].Failed {
			t.Fatalf("activity %+v, want %+v", got, want)
		}
	}
	if got, _ := q.Activity(start.Add(time.Minute)); len(got) != 1 {
		t.Fatalf("activity since the second minute: %+v", got)
	}
}

// A search in bodies reads at most ListOptions.BodyBytes of them per call
// [DefaultBodyBytes], counted by the stored length, and says where to go
// on: large bodies cost a call what their bytes cost, not their number.
func TestListItemsBodyBytesBudget(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	big := strings.Repeat("b", 256<<10)
	for range 12 {
		mustPut(t, q, big)
	}
	needle := mustPut(t, q, "needle")
	seen := map[uint64]int{}
	var after uint64
	var found []uint64
	calls := 0
	for {
		p, err := q.ListItems(ListOptions{Filter: ItemFilter{Text: "needle", InBody: true}, After: after, BodyBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		calls++
		if p.SearchedBytes > 1<<20 || (p.Searched > 4) {
			t.Fatalf("call %d read %d bodies, %d bytes: over the budget of 1 MiB", calls, p.Searched, p.SearchedBytes)
		}
		found = append(found, pageIDs(p)...)
		for id := after + 1; id <= p.Next; id++ {
			seen[id]++
		}
		if p.Next == 0 {
			break
		}
		if p.Next <= after {
			t.Fatalf("call %d went back: next %d after %d", calls, p.Next, after)
		}
		after = p.Next
	}
	if !slices.Equal(found, []uint64{needle}) || calls != 4 {
		t.Fatalf("found %v in %d calls; want [%d] in 4 (4 bodies of 256 KiB a call)", found, calls, needle)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("item %d looked at %d times", id, n)
		}
	}
	// The default is DefaultBodyBytes.
	if (ListOptions{}).BodyBytesBudget() != DefaultBodyBytes {
		t.Fatal("the default budget is not DefaultBodyBytes")
	}
}
