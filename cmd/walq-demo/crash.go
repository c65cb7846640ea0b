package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/walq/walq"
)

// part2 runs the work in a child process on dir, SIGKILLs the child once
// killAt of the items are finished, reopens dir, finishes the work here and
// checks that every item is accounted for.
func part2(cfg *config, dir string, killAt float64, reg *prometheus.Registry) (bool, error) {
	fmt.Printf("part 2 — the same work in a child process, SIGKILLed mid-run, then reopened and finished\n")
	fmt.Printf("queue directory %s\n", dir)

	// The child: this program again, with -child. It reports "put N" once
	// its items are durable, and "done I" when a run of item I completes —
	// before Work acks it.
	exe, err := os.Executable()
	if err != nil {
		return false, err
	}
	cmd := exec.Command(exe, append(cfg.args(), "-child", dir)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return false, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return false, err
	}
	killAfter := max(1, int(math.Ceil(killAt*float64(cfg.items))))
	var put, done atomic.Int64
	watchCtx, stopWatch := context.WithCancel(context.Background())
	go watch(watchCtx, func() string {
		return fmt.Sprintf("%4.1fs child pid %d: %d put, %d finished (SIGKILL at %d)",
			time.Since(start).Seconds(), cmd.Process.Pid, put.Load(), done.Load(), killAfter)
	})
	finished := make(map[int]bool) // items whose work the child completed at least once
	killed := false
	var killedAfter time.Duration
	scanner := bufio.NewScanner(out)
	for scanner.Scan() {
		verb, arg, _ := strings.Cut(scanner.Text(), " ")
		n, err := strconv.Atoi(arg)
		if err != nil {
			continue
		}
		switch verb {
		case "put":
			put.Store(int64(n))
		case "done":
			finished[n] = true
			done.Store(int64(len(finished)))
		}
		if !killed && len(finished) >= killAfter {
			if err := cmd.Process.Kill(); err != nil { // SIGKILL: no chance to flush or clean up
				return false, err
			}
			killed, killedAfter = true, time.Since(start)
		}
	}
	// Lines written before the kill are read to the end: the child
	// finished these items before it died.
	waitErr := cmd.Wait()
	stopWatch()
	if !killed {
		return false, fmt.Errorf("the child ended (%v) before %d items were finished; lower -kill-at", waitErr, killAfter)
	}
	fmt.Printf("child pid %d: put %d items in one durable batch, then ran them with Work; SIGKILL after %.1fs, %d items finished (%s)\n",
		cmd.Process.Pid, put.Load(), killedAfter.Seconds(), len(finished), cmd.ProcessState)

	// Reopen: recovery replays the log and ends the leases the child held.
	q, err := walq.Open(dir, cfg.queueOptions())
	if err != nil {
		return false, fmt.Errorf("reopen after the kill: %w", err)
	}
	defer q.Close()
	defer register(reg, q, "crash")()
	before := q.Stats()
	rec := before.Recovery
	deadBefore := deadItems(q)
	left := before.Ready + before.Delayed + before.Leased
	fmt.Printf("reopened in %v: %d records replayed, torn tail cut: %d bytes; %d put, %d acked and %d dead-lettered before the kill;\n"+
		"  %d leases open at the kill ended as expired (their attempts counted), %d items left\n",
		rec.Duration.Round(time.Microsecond), rec.Replayed, rec.TailCutBytes, before.Put, before.Acked, before.Dead, rec.LeasesExpired, left)

	// Finish the work here.
	j := newJob(cfg, 4)
	delivered := make([]atomic.Bool, cfg.items) // items delivered after the recovery
	handler := func(ctx context.Context, m walq.Message) error {
		if item, err := strconv.Atoi(string(m.Body)); err == nil && item >= 0 && item < cfg.items {
			delivered[item].Store(true)
		}
		return j.handler(ctx, m)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	consumed := make(chan error, 1)
	go func() { consumed <- q.Work(ctx, cfg.workers, handler, walq.WorkOptions{Timeout: cfg.timeout}) }()
	finishStart := time.Now()
	watchCtx, stopWatch = context.WithCancel(context.Background())
	var acked, dead atomic.Int64
	go watch(watchCtx, func() string {
		return fmt.Sprintf("%4.1fs after recovery: %d acked, %d dead-lettered of %d left",
			time.Since(finishStart).Seconds(), acked.Load(), dead.Load(), left)
	})
	elapsed, err := waitSettled(q, cfg.items, consumed, func(st walq.Stats) {
		acked.Store(int64(st.Acked - before.Acked))
		dead.Store(int64(st.Dead - before.Dead))
	})
	stopWatch()
	if err != nil {
		return false, err
	}
	stop()
	if err := <-consumed; err != nil {
		return false, err
	}
	after := q.Stats()
	processed, _ := j.count()
	fmt.Printf("finished the rest in %.1fs: %d runs completed, %d more acked, %d more dead-lettered\n",
		elapsed.Seconds(), processed, after.Acked-before.Acked, after.Dead-before.Dead)

	// Account for every item: acked before the kill (never delivered
	// again), dead before the kill, or delivered after the recovery.
	var ackedBefore, notFinished, rerun []int
	for i := range cfg.items {
		switch {
		case delivered[i].Load():
			if finished[i] {
				rerun = append(rerun, i)
			}
		case !deadBefore[i]:
			ackedBefore = append(ackedBefore, i)
			if !finished[i] {
				notFinished = append(notFinished, i)
			}
		}
	}
	ok := true
	check := func(good bool, format string, args ...any) {
		mark := "ok  "
		if !good {
			mark, ok = "FAIL", false
		}
		fmt.Printf("  %s "+format+"\n", append([]any{mark}, args...)...)
	}
	fmt.Println("checks:")
	check(put.Load() == int64(cfg.items) && before.Put == uint64(cfg.items),
		"every put the child reported survived: %d reported, %d after recovery", put.Load(), before.Put)
	check(len(ackedBefore) == int(before.Acked),
		"no acked item came back: %d items were not delivered after the recovery, as many as were acked before the kill", len(ackedBefore))
	unfinished := ""
	if len(notFinished) > 0 {
		unfinished = "; not finished:" + sortedPrefix(notFinished, 10)
	}
	check(len(notFinished) == 0, "the child had finished each of them%s", unfinished)
	check(after.Ready+after.Delayed+after.Leased == 0 && after.Acked+uint64(after.Dead) == after.Put,
		"nothing lost: %d put = %d acked + %d dead-lettered, nothing left in the queue", after.Put, after.Acked, after.Dead)
	fmt.Printf("  note %s finished by the child, but not acked on disk yet at the kill, ran again after the recovery%s:\n"+
		"       delivery is at least once\n", plural(len(rerun), "item"), sortedPrefix(rerun, 10))
	return ok, nil
}

func deadItems(q *walq.Queue) map[int]bool {
	dead := make(map[int]bool)
	eachDeadLetter(q, func(d walq.DeadLetter) {
		if item, err := strconv.Atoi(string(d.Body)); err == nil {
			dead[item] = true
		}
	})
	return dead
}

// eachDeadLetter calls fn for every dead letter of q, a page at a time:
// the list may be larger than memory should hold at once.
func eachDeadLetter(q *walq.Queue, fn func(walq.DeadLetter)) {
	var cur walq.DeadLetterCursor
	for {
		page, next := q.DeadLetterPage(cur, 0)
		if len(page) == 0 {
			return
		}
		for _, d := range page {
			fn(d)
		}
		cur = next
	}
}

func sortedPrefix(items []int, n int) string {
	sort.Ints(items)
	if len(items) == 0 {
		return ""
	}
	s := strings.Trim(fmt.Sprint(items[:min(n, len(items))]), "[]")
	if len(items) > n {
		s += " …"
	}
	if len(items) == 1 {
		return " (item " + s + ")"
	}
	return " (items " + s + ")"
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// runChild is part 2's child process: it puts the items (once), runs them
// with Work, and reports on stdout until it is killed.
func runChild(cfg *config, dir string) error {
	q, err := walq.Open(dir, cfg.queueOptions())
	if err != nil {
		return err
	}
	defer q.Close()
	if q.Stats().Put == 0 {
		if _, err := q.PutBatch(context.Background(), bodies(cfg.items)); err != nil {
			return err
		}
	}
	fmt.Printf("put %d\n", q.Stats().Put) // durable: PutBatch returned after the fsync
	var mu sync.Mutex
	j := newJob(cfg, 5)
	j.onDone = func(item int) {
		mu.Lock()
		fmt.Printf("done %d\n", item) // one write per line
		mu.Unlock()
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	consumed := make(chan error, 1)
	go func() { consumed <- q.Work(ctx, cfg.workers, j.handler, walq.WorkOptions{Timeout: cfg.timeout}) }()
	if _, err := waitSettled(q, cfg.items, consumed, func(walq.Stats) {}); err != nil {
		return err
	}
	stop()
	return <-consumed
}
