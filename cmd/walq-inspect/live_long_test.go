//go:build long

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walq/walq"
)

// liveTarget is how many records the live queue writes at least; the
// follower prints up to this index and stops.
const liveTarget = 1500

// A queue runs in this process (puts, gets, acks, nacks, compactions with
// 4 KiB segments that roll and get truncated) while the tool reads the same
// directory over and over, for a few seconds of real time: a long test, as
// how far both get in a second depends on the machine. No run may report corruption or fail, and the
// follower must print every record in order (or say which ones a compaction
// took before it could read them).
func TestLiveQueueNoFalseCorruption(t *testing.T) {
	dir := t.TempDir()
	q, err := walq.Open(dir, walq.Options{
		SegmentSize:        4096,
		Visibility:         time.Minute,
		Sync:               walq.SyncNever, // more records per second: more chances to race the reader
		DisableAutoCompact: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() { writerDone <- writeLoad(q, stop) }()

	var follow struct {
		sync.WaitGroup
		stdout, stderr string
		code           int
	}
	follow.Add(1)
	go func() {
		defer follow.Done()
		follow.stdout, follow.stderr, follow.code = inspect("log", "--follow", "--json", "--interval", "2ms",
			"--to", strconv.Itoa(liveTarget), dir)
	}()

	deadline := time.Now().Add(20 * time.Second)
	for q.Stats().LastLSN < 10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // so that item 1 exists
	}
	runs, tails, moves := 0, 0, 0
	const minRuns = 50 // every command six times
	for q.Stats().LastLSN < liveTarget+200 || runs < minRuns {
		if time.Now().After(deadline) {
			t.Fatalf("the load did not reach %d records in time (%d)", liveTarget+200, q.Stats().LastLSN)
		}
		for _, args := range [][]string{
			{"summary", dir},
			{"log", "--json", dir},
			{"log", "--frames", "--json", dir},
			{"verify", dir},
			{"state", "--json", dir},
			{"item", dir, "1"},
			{"dead", dir},
			{"space", dir},
		} {
			stdout, stderr, code := inspect(args...)
			runs++
			if code != exitOK || strings.Contains(stdout+stderr, "PROBLEM") || strings.Contains(stderr, "corrupt") ||
				strings.Contains(stderr, "not known from here on") {
				t.Fatalf("%v on a live queue: exit %d\n%s\n--- stderr\n%s", args, code, stdout, stderr)
			}
			if strings.Contains(stdout+stderr, "recovery would cut") {
				tails++
			}
			switch {
			case args[0] == "log" && args[1] == "--frames":
				moves += checkFramesConsecutive(t, stdout, stderr)
			case args[0] == "log":
				moves += checkConsecutive(t, stdout, stderr)
			}
		}
	}
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	followed := make(chan struct{})
	go func() { follow.Wait(); close(followed) }()
	select {
	case <-followed:
	case <-time.After(60 * time.Second):
		// Not a wait for time to pass: a follower stuck short of its
		// target would otherwise hang the test binary until its timeout.
		t.Fatalf("log --follow did not reach index %d within 60s of the load's end (the log holds %d records)",
			liveTarget, q.Stats().LastLSN)
	}
	if follow.code != exitOK {
		t.Fatalf("log --follow: exit %d\n%s", follow.code, follow.stderr)
	}
	moves += checkConsecutive(t, follow.stdout, follow.stderr)
	if !strings.Contains(follow.stdout, fmt.Sprintf(`{"index":%d,`, liveTarget)) && !reportedGone(follow.stderr, liveTarget) {
		t.Fatalf("log --follow stopped before index %d, and did not say a compaction took it:\n%s", liveTarget, follow.stderr)
	}
	st := q.Stats()
	t.Logf("%d runs over %d records, %d compactions; %d runs saw a frame being written, %d reads lost records to a compaction",
		runs, st.LastLSN, st.Compactions, tails, moves)
	if st.Compactions < 10 {
		t.Fatalf("the load did not compact enough to test anything: %d compactions", st.Compactions)
	}

	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := inspect("verify", dir)
	if code != exitOK || strings.Contains(stdout, "warning") {
		t.Fatalf("verify after close: exit %d\n%s%s", code, stdout, stderr)
	}
}

// writeLoad puts, gets, acks and nacks, and compacts every 20 rounds.
func writeLoad(q *walq.Queue, stop <-chan struct{}) error {
	ctx := context.Background()
	for round := 0; ; round++ {
		select {
		case <-stop:
			return nil
		default:
		}
		items := make([]walq.Item, 1+round%3)
		for i := range items {
			items[i] = walq.Item{Body: []byte(fmt.Sprintf("round %d item %d %s", round, i, strings.Repeat("·", round%40)))}
			if round%5 == 0 {
				items[i].Key = fmt.Sprintf("key-%d-%d", round, i)
			}
		}
		if _, err := q.PutBatch(ctx, items); err != nil {
			return fmt.Errorf("put batch: %w", err)
		}
		for range len(items) {
			m, ok, err := q.TryGet()
			if err != nil || !ok {
				return fmt.Errorf("get: ok %v, %v", ok, err)
			}
			if round%7 == 0 {
				err = q.Nack(m.Receipt, errors.New("try again"))
			} else {
				err = q.Ack(m.Receipt)
			}
			if err != nil {
				return fmt.Errorf("end lease: %w", err)
			}
		}
		if round%20 == 19 {
			if err := q.Compact(); err != nil {
				return fmt.Errorf("compact: %w", err)
			}
		}
	}
}

// checkConsecutive checks that JSON lines of log have consecutive indexes,
// except where stderr reports records compacted away before they could be
// read; it returns how many such reports there were.
// gonePattern is the note of records a compaction took before the reader
// could read them.
var gonePattern = regexp.MustCompile(`records (\d+)\.\.(\d+) were compacted away before they could be read`)

// reportedGone reports whether stderr says that a compaction took record
// index before it could be read.
func reportedGone(stderr string, index uint64) bool {
	for _, m := range gonePattern.FindAllStringSubmatch(stderr, -1) {
		from, _ := strconv.ParseUint(m[1], 10, 64)
		to, _ := strconv.ParseUint(m[2], 10, 64)
		if from <= index && index <= to {
			return true
		}
	}
	return false
}

func checkConsecutive(t *testing.T, stdout, stderr string) int {
	t.Helper()
	gaps := strings.Count(stderr, "compacted away before they could be read")
	var prev uint64
	jumps := 0
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if line == "" {
			continue
		}
		var rec struct {
			Index uint64 `json:"index"`
			Type  string `json:"type"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log --json printed a line that is not JSON: %v\n%s", err, line)
		}
		switch {
		case prev != 0 && rec.Index <= prev:
			t.Fatalf("log printed index %d after %d", rec.Index, prev)
		case prev != 0 && rec.Index != prev+1:
			jumps++
		}
		prev = rec.Index
	}
	if jumps > gaps {
		t.Fatalf("log skipped records %d times but reported %d gaps\n%s", jumps, gaps, stderr)
	}
	return gaps
}

// checkFramesConsecutive checks that JSON lines of log --frames follow each
// other (each frame's first LSN one past the last of the frame before, its
// watermark below its first LSN), except where stderr reports records
// compacted away; it returns how many such reports there were.
func checkFramesConsecutive(t *testing.T, stdout, stderr string) int {
	t.Helper()
	gaps := strings.Count(stderr, "compacted away before they could be read")
	var prev uint64
	jumps := 0
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if line == "" {
			continue
		}
		var f struct {
			First, Last, Watermark uint64
			Records                uint64
			Size                   int64
		}
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("log --frames --json printed a line that is not JSON: %v\n%s", err, line)
		}
		switch {
		case f.Records == 0 || f.Last != f.First+f.Records-1 || f.Watermark >= f.First || f.Size <= 0:
			t.Fatalf("log --frames printed an impossible frame: %s", line)
		case prev != 0 && f.First <= prev:
			t.Fatalf("log --frames printed LSN %d after %d", f.First, prev)
		case prev != 0 && f.First != prev+1:
			jumps++
		}
		prev = f.Last
	}
	if jumps > gaps {
		t.Fatalf("log --frames skipped records %d times but reported %d gaps\n%s", jumps, gaps, stderr)
	}
	return gaps
}
