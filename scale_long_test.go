//go:build long

package walq

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// TestCollectorScrapeTwentyThousandQueues: a scrape of a directory of
// 20,000 queues holds the series of the default queue, of
// DefaultCollectorTopN queues and of "(other)", and the directory's.
func TestCollectorScrapeTwentyThousandQueues(t *testing.T) {
	q, _, _ := testQueue(t, Options{Sync: SyncNever})
	createQueues(t, q, 20000)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(q, "jobs"))
	start := time.Now()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	series, perQueue, dir := 0, 0, 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			series++
			queue := false
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" {
					queue = true
					if l.GetValue() == "(default)" {
						perQueue++
					}
				}
			}
			if !queue {
				dir++
			}
		}
	}
	t.Logf("20,000 queues: %d series in a scrape (%d for each queue with its own, %d of the directory), gathered in %v", series, perQueue, dir, took)
	if want := (1+DefaultCollectorTopN+1)*perQueue + dir; series != want {
		t.Fatalf("%d series, want %d: the default queue, %d by backlog, (other), and the directory's", series, want, DefaultCollectorTopN)
	}
}
