// Command walq-to-jetstream moves the items of a walq queue directory into
// a Dir on NATS JetStream: ready and delayed items (with their due times),
// keys, deadlines, priorities, attempts and histories, and dead letters.
// It reads the directory without changing it, and stores its progress in
// JetStream in the same atomic batch as the items it moves: stopped at any
// point (even by SIGKILL) and run again, it goes on where it stopped,
// moving nothing twice. With -remove it removes the directory, once a
// move has finished and only if the directory has not changed since.
//
//	walq-to-jetstream -dir /var/lib/myapp/queue -server nats://127.0.0.1:4222 -to myapp
//	walq-to-jetstream -dir /var/lib/myapp/queue -server nats://127.0.0.1:4222 -to myapp -remove
//
// Stop the service that uses the directory first: the move holds the
// directory's lock, and refuses one a queue holds.
//
// Any number of directories can move into one Dir. Items keep their IDs
// where they can (the first directory moved into a Dir the move creates);
// the items of another directory move under IDs of their own, each its ID
// in the directory plus the offset the move prints. -keep-ids refuses a
// move that cannot keep them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walq/walq"
	walqjs "github.com/walq/walq/jetstream"
)

func main() {
	dir := flag.String("dir", "", "the walq queue directory to move (required)")
	server := flag.String("server", nats.DefaultURL, "NATS server URL(s), comma-separated")
	to := flag.String("to", "", "the Dir to move into (required): its streams are WALQ_<to>, WALQ_<to>_DLQ")
	replicas := flag.Int("replicas", 0, "replicas of the Dir's streams, when the move creates them [1]; for a Dir that exists, 0 or its own")
	keyWindow := flag.Duration("key-window", 0, "the Dir's key window, when the move creates it [2m]; for a Dir that exists, 0 or its own")
	prios := flag.String("priorities", "", "priority levels of the queues, comma-separated [the items' priorities]")
	batch := flag.Int("batch", 100, "items per atomic batch (at most the server's atomic batch limit less one, 999 by default; a larger one is that)")
	pace := flag.Duration("pace", 0, "pause after each batch")
	remove := flag.Bool("remove", false, "once the move has finished, remove the walq directory (only if unchanged since)")
	keepIDs := flag.Bool("keep-ids", false, "refuse the move unless the items keep their IDs (else a directory whose IDs another took moves under IDs of its own)")
	flag.Parse()
	if *dir == "" || *to == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*dir, *server, *to, *replicas, *keyWindow, *prios, *batch, *pace, *remove, *keepIDs); err != nil {
		fmt.Fprintln(os.Stderr, "walq-to-jetstream:", err)
		os.Exit(1)
	}
}

func run(dir, server, to string, replicas int, keyWindow time.Duration, prios string, batch int, pace time.Duration, remove, keepIDs bool) error {
	var levels []int
	for _, f := range strings.Split(prios, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("-priorities: %q is not an integer", f)
		}
		levels = append(levels, p)
	}
	nc, err := nats.Connect(server, nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx := context.Background()
	// A Dir created for the move starts past the directory's IDs, which
	// it keeps: read where they end.
	info, err := walq.ReadDir(dir, func(walq.StoredItem) error { return nil })
	if err != nil {
		return err
	}
	d, err := walqjs.OpenDir(ctx, js, to, walqjs.Options{Replicas: replicas, KeyWindow: keyWindow, FirstSeq: info.NextID})
	if err != nil {
		return err
	}
	if remove {
		if err := d.RemoveMoved(ctx, dir); err != nil {
			return err
		}
		fmt.Printf("removed %s: every item of it is in Dir %s\n", dir, to)
		return nil
	}
	start := time.Now()
	rep, err := d.MoveFrom(ctx, dir, walqjs.MoveOptions{
		Priorities: levels,
		Batch:      batch,
		Pace:       pace,
		KeepIDs:    keepIDs,
		Progress: func(r walqjs.MoveReport) {
			fmt.Printf("moved %d of %d\n", r.Skipped+r.Ready+r.Delayed+r.Dead+r.Discarded, r.Items)
		},
	})
	if err != nil {
		return err
	}
	fmt.Printf("done in %v: %d items: %d ready, %d delayed, %d dead letters, %d past their deadline (not moved), %d moved by an earlier run\n",
		time.Since(start).Round(time.Millisecond), rep.Items, rep.Ready, rep.Delayed, rep.Dead, rep.Discarded, rep.Skipped)
	if rep.IDOffset == 0 {
		fmt.Println("IDs: as in the directory")
	} else {
		fmt.Printf("IDs: each item's ID in the directory plus %d (another directory's items, or the Dir's own, hold the directory's IDs)\n", rep.IDOffset)
	}
	return nil
}
