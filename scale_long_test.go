//go:build long

package walq

import (
	"fmt"
	"testing"
)

// TestListTwentyThousandQueues: Queues lists 20,000 named queues once each,
// in the order of creation, and their figures add up to DirStats'.
func TestListTwentyThousandQueues(t *testing.T) {
	const n = 20000
	q, _, _ := testQueue(t, Options{Sync: SyncNever})
	createQueues(t, q, n)
	for _, i := range []int{0, n / 2, n - 1} {
		mustPut(t, mustOpenQueue(t, q, fmt.Sprintf("tenant-%05d", i), QueueOptions{}), "x")
	}
	infos, err := q.Queues()
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != n+1 || infos[0].Name != "" {
		t.Fatalf("Queues lists %d queues (first %q), want the default queue and %d more", len(infos), infos[0].Name, n)
	}
	for i, in := range infos[1:] {
		if in.ID <= infos[i].ID || (i%1000 == 0 && in.Name != fmt.Sprintf("tenant-%05d", i)) {
			t.Fatalf("Queues lists %q (ID %d) after ID %d: not the order of creation", in.Name, in.ID, infos[i].ID)
		}
	}
	var items int
	for _, in := range infos {
		items += in.Stats.Items
	}
	if ds := q.DirStats(); ds.Items != items || items != 3 {
		t.Fatalf("DirStats counts %d items, the queues %d; want 3", ds.Items, items)
	}
}
