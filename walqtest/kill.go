package walqtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// childEnv names the queue a KilledWorker child process works on; set, it
// makes the KilledWorker subtest the worker instead of the test.
const childEnv = "WALQTEST_KILLED_WORKER"

const (
	killItems   = 300
	killAfter   = 100 // acks the parent waits for before the SIGKILL
	killWorkers = 4
)

func killConfig() Config {
	return Config{Visibility: time.Second, MaxAttempts: 10, Backoff: noBackoff, KeyWindow: time.Minute}
}

// testKilledWorker: a worker process is killed with SIGKILL in the middle
// of its work; the queue, opened again, delivers every item the worker did
// not ack, and none whose ack returned.
func testKilledWorker(t *testing.T, tg Target) {
	if name := os.Getenv(childEnv); name != "" {
		killedWorkerChild(t, tg, name)
		return
	}
	e := newRealEnv(t, tg, killConfig())
	all := make(map[uint64]bool, killItems)
	for i := range killItems {
		all[e.put(fmt.Sprintf("item %03d", i))] = true
	}
	q := e.q
	e.q = nil
	mustOK(t, "close before the worker process starts", q.Close())

	exe, err := os.Executable()
	mustOK(t, "find the test binary", err)
	cmd := exec.Command(exe, "-test.run="+runPattern(t.Name()), "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+e.name)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	mustOK(t, "stdout pipe", err)
	mustOK(t, "start the worker process", cmd.Start())

	// The child says "acking ID" before each Ack and "acked ID" after one
	// that returned nil.
	var mu sync.Mutex
	acking, acked := map[uint64]bool{}, map[uint64]bool{}
	enough := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			verb, arg, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "walqtest: "), " ")
			id, err := strconv.ParseUint(arg, 10, 64)
			if !ok || err != nil || !strings.HasPrefix(sc.Text(), "walqtest: ") {
				continue
			}
			mu.Lock()
			switch verb {
			case "acking":
				acking[id] = true
			case "acked":
				acked[id] = true
				if len(acked) == killAfter {
					close(enough)
				}
			}
			mu.Unlock()
		}
	}()
	select {
	case <-enough:
	case <-readDone:
		_ = cmd.Wait()
		t.Fatalf("the worker process ended before %d acks: %s", killAfter, stderr.String())
	case <-time.After(waitLimit * 3):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the worker process made fewer than %d acks in %v: %s", killAfter, waitLimit*3, stderr.String())
	}
	mustOK(t, "SIGKILL the worker process", cmd.Process.Kill())
	<-readDone
	werr := cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("worker process killed (%v) after %d acks returned, %d begun", werr, len(acked), len(acking))

	e.open()
	delivered := make(map[uint64]int)
	mustCome := 0
	for id := range all {
		if !acking[id] {
			mustCome++
		}
	}
	// Drain: leases the dead process held come back at the latest after
	// their visibility; stop when a Get has waited three of them with
	// nothing, once every item that must come has come.
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*e.cfg.Visibility)
		m, err := e.q.Get(ctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				t.Fatalf("Get after the reopen: %v", err)
			}
			n := 0
			for id := range delivered {
				if !acking[id] {
					n++
				}
			}
			if n >= mustCome {
				break
			}
			t.Fatalf("after the reopen only %d of the %d items the worker never acked came back", n, mustCome)
		}
		delivered[m.ID]++
		mustOK(t, "ack after the reopen", e.q.Ack(m.Receipt))
	}
	var bad []string
	for id := range all {
		switch {
		case acked[id] && delivered[id] > 0:
			bad = append(bad, fmt.Sprintf("item %d: its ack returned before the kill, and it was delivered again after the reopen", id))
		case !acking[id] && delivered[id] == 0:
			bad = append(bad, fmt.Sprintf("item %d: lost: never acked, not delivered after the reopen", id))
		case delivered[id] > 1:
			bad = append(bad, fmt.Sprintf("item %d: delivered %d times after the reopen", id, delivered[id]))
		}
	}
	for id := range delivered {
		if !all[id] {
			bad = append(bad, fmt.Sprintf("item %d was delivered but never put", id))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("after the SIGKILL and the reopen:\n%s", strings.Join(bad, "\n"))
	}
	if len(delivered) == 0 {
		t.Fatalf("the worker process finished every item before the kill: nothing was mid-run")
	}
	t.Logf("after the reopen: %d items delivered, each once; none of the %d acked came back", len(delivered), len(acked))
}

// killedWorkerChild is the worker process: it works through the queue,
// saying what it acks, until it is killed.
func killedWorkerChild(t *testing.T, tg Target, name string) {
	q, err := tg.Open(name, killConfig())
	if err != nil {
		fmt.Fprintf(os.Stderr, "walqtest: worker process: open %s: %v\n", name, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	say := func(verb string, id uint64) {
		mu.Lock()
		fmt.Fprintf(os.Stdout, "walqtest: %s %d\n", verb, id)
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*waitLimit)
	defer cancel()
	var wg sync.WaitGroup
	for range killWorkers {
		wg.Go(func() {
			for {
				m, err := q.Get(ctx)
				if err != nil {
					return
				}
				time.Sleep(time.Millisecond) // the work
				say("acking", m.ID)
				if err := q.Ack(m.Receipt); err == nil {
					say("acked", m.ID)
				} else {
					fmt.Fprintf(os.Stderr, "walqtest: worker process: ack %s: %v\n", describe(m), err)
				}
			}
		})
	}
	wg.Wait()
	// Not killed: the parent gave up. Exit without closing, as a kill
	// would.
	fmt.Fprintln(os.Stderr, "walqtest: worker process: not killed in time")
	os.Exit(3)
}

// runPattern is the -test.run pattern that selects exactly the test name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
