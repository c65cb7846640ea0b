package walq

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestReviewScaleOtherAgeLabelledPaused: walq_oldest_ready_age_seconds
// carries paused="true" "so an old item behind a pause shows as what it
// is" (docs/metrics.md), and the natural stall alert is
// walq_oldest_ready_age_seconds{paused="false"} > X. The "(other)" sum
// takes the oldest age over its queues and labels it paused="true" when
// any of them is paused: a queue that is not paused, whose consumers have
// stalled for 10 minutes, is summed into one series labelled paused="true"
// with the age of another queue's paused item. The stall has no
// paused="false" series at all: the alert cannot fire.
func TestReviewScaleOtherAgeLabelledPaused(t *testing.T) {
	q, clock, _ := testQueue(t, Options{})
	held := mustOpenQueue(t, q, "held", QueueOptions{})
	stalled := mustOpenQueue(t, q, "stalled", QueueOptions{})
	must(t, held.Pause(time.Time{})) // paused on purpose, until Resume
	mustPut(t, held, "waits behind the pause")
	clock.Advance(10 * time.Minute)
	mustPut(t, stalled, "nobody takes it")
	clock.Advance(10 * time.Minute)
	if st := stalled.Stats(); st.Paused || st.OldestReady != 10*time.Minute {
		t.Fatalf("stalled: paused %v, oldest ready %v", st.Paused, st.OldestReady)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(q, "jobs", CollectorTopN(0)))
	families, err := reg.Gather()
	must(t, err)
	got := scraped(t, families)
	var ages []string
	for name, v := range got {
		if strings.HasPrefix(name, "walq_oldest_ready_age_seconds") && strings.Contains(name, `"(other)"`) {
			ages = append(ages, name+" "+time.Duration(v*float64(time.Second)).String())
		}
	}
	if got[`walq_oldest_ready_age_seconds{paused="false",queue="(other)"}`] != 600 {
		t.Fatalf("a queue not paused, its oldest item ready for 10m, is summed into (other) as %v: "+
			"no paused=\"false\" age shows its stall", ages)
	}
}
