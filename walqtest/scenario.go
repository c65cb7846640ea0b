package walqtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq"
)

// The scenario of the reference articles on visibility timeouts, in real
// time: 500 items, 10 workers, 2% of the items hang until a 2 s per-item
// timeout (every attempt), 10% take 0.6 s, a visibility of 0.5 s and 3
// attempts. Measured there on an in-process queue: without a heartbeat 54
// items ran twice, each with a late ack; with one, none did.
const (
	scenarioItems      = 500
	scenarioWorkers    = 10
	scenarioVisibility = 500 * time.Millisecond
	scenarioTimeout    = 2 * time.Second
	scenarioSlow       = 600 * time.Millisecond
	scenarioAttempts   = 3
	// scenarioLimit bounds a run: about 10 s with the heartbeat and 15 s
	// without (the hung items' runs hold workers for 2 s each), with room
	// for a loaded machine.
	scenarioLimit = 120 * time.Second
)

type itemKind int

const (
	fast itemKind = iota
	slow          // takes scenarioSlow: longer than the visibility
	hung          // hangs until its context ends, every attempt
)

func scenarioKind(i int) itemKind {
	switch {
	case i%50 == 0:
		return hung // 10 of 500: 2%
	case i%10 == 5:
		return slow // 50 of 500: 10%
	}
	return fast
}

// scenario is one run: the queue, what was put, and what the handlers saw.
type scenario struct {
	t    *testing.T
	e    *env
	kind map[uint64]itemKind // by item ID

	mu       sync.Mutex
	running  map[uint64]int // handler runs in progress, by item
	runs     map[uint64]int // handler runs started, by item
	overlaps map[uint64]int // runs that started while another run of the item was in progress
	acked    map[uint64]int // acks that succeeded, by item (no-heartbeat loop only)
	late     map[uint64]int // acks and nacks refused with ErrLeaseLost, by item (no-heartbeat loop only)
	// overlapped counts, by item, runs that another run started during;
	// each must end in a late ack or nack.
	overlapped map[uint64]int
}

func newScenario(t *testing.T, tg Target) *scenario {
	// Real time whatever the engine: the heartbeat, the timeouts and the
	// handlers' work run on the system clock.
	e := newRealEnv(t, tg, Config{
		Visibility:  scenarioVisibility,
		MaxAttempts: scenarioAttempts,
		Backoff:     func(int) time.Duration { return 10 * time.Millisecond },
		KeyWindow:   time.Minute,
	})
	s := &scenario{t: t, e: e, kind: make(map[uint64]itemKind),
		running: make(map[uint64]int), runs: make(map[uint64]int), overlaps: make(map[uint64]int),
		acked: make(map[uint64]int), late: make(map[uint64]int), overlapped: make(map[uint64]int)}
	for i := range scenarioItems {
		id := e.put(fmt.Sprintf("item %03d", i))
		s.kind[id] = scenarioKind(i)
	}
	return s
}

// handle is the handler: it does the item's work, in the time its kind
// takes, and notes overlapping runs.
func (s *scenario) handle(ctx context.Context, m walq.Message) error {
	s.mu.Lock()
	if s.running[m.ID] > 0 {
		s.overlaps[m.ID]++
		s.overlapped[m.ID] += s.running[m.ID]
	}
	s.running[m.ID]++
	s.runs[m.ID]++
	kind, known := s.kind[m.ID]
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running[m.ID]--
		s.mu.Unlock()
	}()
	if !known {
		return walq.Permanent(fmt.Errorf("item %d was never put", m.ID))
	}
	switch kind {
	case hung:
		<-ctx.Done()
		return fmt.Errorf("hung: %w", ctx.Err())
	case slow:
		t := time.NewTimer(scenarioSlow)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// waitDead waits until the hung items are all dead letters, and returns
// the dead letters.
func (s *scenario) waitDead(want int) map[uint64]walq.DeadLetter {
	var dl map[uint64]walq.DeadLetter
	eventuallyWithin(s.t, fmt.Sprintf("%d dead letters", want), scenarioLimit, func() (bool, error) {
		var err error
		dl, err = deadLettersByID(s.e.q)
		return len(dl) >= want, err
	})
	return dl
}

// testScenarioWork: with Work's heartbeat, 0 items lost, 0 run twice, and
// the 10 hung items dead-lettered with their timeout and 3 attempts.
func testScenarioWork(t *testing.T, tg Target) {
	s := newScenario(t, tg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- walq.Work(ctx, s.e.q, scenarioWorkers, s.handle, walq.WorkOptions{Timeout: scenarioTimeout})
	}()
	hungCount := 0
	for _, k := range s.kind {
		if k == hung {
			hungCount++
		}
	}
	s.waitDead(hungCount)
	// Every other item has been handled once it had its run and the
	// queue has nothing left to deliver.
	eventuallyWithin(t, "every item handled", scenarioLimit, func() (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for id, k := range s.kind {
			if k != hung && s.runs[id] == 0 {
				return false, nil
			}
			if s.running[id] > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Work: %v", err)
	}
	dl := s.e.deadLetters()

	s.mu.Lock()
	defer s.mu.Unlock()
	var twice []string
	for id, k := range s.kind {
		want := 1
		if k == hung {
			want = scenarioAttempts
		}
		if s.runs[id] != want || s.overlaps[id] != 0 {
			twice = append(twice, fmt.Sprintf("item %d (%s): %d runs (%d overlapping), want %d", id, kindName(k), s.runs[id], s.overlaps[id], want))
		}
	}
	if len(twice) > 0 {
		t.Errorf("with the heartbeat, %d items ran other than once (hung ones: once per attempt, never overlapping):\n%s",
			len(twice), strings.Join(twice, "\n"))
	}
	if len(dl) != hungCount {
		t.Errorf("%d dead letters, want the %d hung items", len(dl), hungCount)
	}
	for id, d := range dl {
		switch {
		case s.kind[id] != hung:
			t.Errorf("dead letter %d is a %s item, not a hung one: %q", id, kindName(s.kind[id]), d.LastError)
		case d.Attempts != scenarioAttempts:
			t.Errorf("dead letter %d: %d attempts, want %d", id, d.Attempts, scenarioAttempts)
		case !strings.Contains(d.LastError, "timed out"):
			t.Errorf("dead letter %d: last error %q, want the handler's timeout", id, d.LastError)
		}
	}
	// Nothing was lost and nothing acked comes back: past another
	// visibility, nothing is left to deliver.
	time.Sleep(2 * scenarioVisibility)
	s.e.noneNow("after Work handled every item")
}

// testScenarioNoHeartbeat: a plain Get, handle, Ack loop with the same
// per-item timeout and no heartbeat. The slow and the hung items outlive
// their leases and run again; every run but an item's last must have ended
// in a late ack or nack (ErrLeaseLost), so that the worker knew its work
// may be done twice; no item may be acked twice or lost: each ends acked
// or dead-lettered.
func testScenarioNoHeartbeat(t *testing.T, tg Target) {
	s := newScenario(t, tg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, scenarioWorkers)
	for range scenarioWorkers {
		wg.Go(func() {
			for {
				m, err := s.e.q.Get(ctx)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				hctx, hcancel := context.WithTimeout(ctx, scenarioTimeout)
				herr := s.handle(hctx, m)
				hcancel()
				var end error
				if herr == nil {
					end = s.e.q.Ack(m.Receipt)
				} else {
					end = s.e.q.Nack(m.Receipt, herr)
				}
				s.mu.Lock()
				switch {
				case errors.Is(end, walq.ErrLeaseLost):
					s.late[m.ID]++
				case end != nil:
					s.mu.Unlock()
					errs <- fmt.Errorf("settling %s: %w", describe(m), end)
					return
				case herr == nil:
					s.acked[m.ID]++
				}
				s.mu.Unlock()
			}
		})
	}
	var dl map[uint64]walq.DeadLetter
	eventuallyWithin(t, "every item acked or dead-lettered", scenarioLimit, func() (bool, error) {
		select {
		case err := <-errs:
			return false, err
		default:
		}
		var err error
		if dl, err = deadLettersByID(s.e.q); err != nil {
			return false, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for id := range s.kind {
			if s.acked[id] > 0 || dl[id].ID == id {
				n++
			}
		}
		return n == len(s.kind), nil
	})
	cancel()
	wg.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	overlaps, late, reruns := 0, 0, 0
	var bad []string
	for id, k := range s.kind {
		overlaps += s.overlaps[id]
		late += s.late[id]
		reruns += max(s.runs[id]-1, 0)
		_, dead := dl[id]
		switch {
		case s.runs[id]-1 > s.late[id]:
			bad = append(bad, fmt.Sprintf("item %d (%s) ran %d times, but only %d acks or nacks were late",
				id, kindName(k), s.runs[id], s.late[id]))
		case s.acked[id] > 1:
			bad = append(bad, fmt.Sprintf("item %d (%s) acked %d times", id, kindName(k), s.acked[id]))
		case s.acked[id] == 1 && dead:
			bad = append(bad, fmt.Sprintf("item %d (%s) acked and dead-lettered", id, kindName(k)))
		case s.overlapped[id] > s.late[id]:
			bad = append(bad, fmt.Sprintf("item %d (%s): %d runs were overlapped by a later delivery, but only %d acks or nacks were late",
				id, kindName(k), s.overlapped[id], s.late[id]))
		}
	}
	if len(bad) > 0 {
		t.Errorf("without the heartbeat:\n%s", strings.Join(bad, "\n"))
	}
	if reruns == 0 {
		t.Errorf("without the heartbeat no item ran twice: the slow items' leases (%v) never ran out under their %v of work", scenarioVisibility, scenarioSlow)
	}
	t.Logf("without the heartbeat: %d runs repeated an earlier one (%d while it still ran), %d acks and nacks were late, %d dead letters",
		reruns, overlaps, late, len(dl))
}

func kindName(k itemKind) string {
	switch k {
	case slow:
		return "slow"
	case hung:
		return "hung"
	}
	return "fast"
}
