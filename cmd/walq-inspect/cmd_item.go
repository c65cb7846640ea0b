package main

import (
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/walq/walq/state"
)

var itemCmd = &command{
	name:  "item",
	args:  "DIR ID",
	short: "one item's whole history and where it is now",
	long: `
Prints where item ID is now (ready, delayed, leased, dead, or gone: acked,
discarded or purged) with its attempts, last error, key and body, then every
record in the log that changed it: the put, each lease with its attempt and
lease end, extends, nacks with their cause, expiries, the dead-lettering,
redrives and the ack. Records compacted away are summed up by the snapshot.

A stored item's attempts are listed as the state keeps them (its last 10
leases, whether or not their records are still in the log): when each
started and ended, how it ended (nack, expire, deadletter; "running" for
the open lease) and its error text. An item's ID is unique in the
directory, whichever queue it is in; in a directory with named queues the
item's queue is shown (by name, "(default)" for the default queue, and
incarnation ID), and an item gone with its queue says so. --queue NAME
checks that the item is, or was, in a queue of that name.`,
	flags: func(fs *flag.FlagSet) any {
		o := &itemOpts{now: nowFlag(fs), queue: queueFlag(fs)}
		fs.IntVar(&o.bodyMax, "body-max", defaultBodyMax, "show at most `n` bytes of the body (0: all)")
		return o
	},
	run: runItem,
}

type itemOpts struct {
	now     *timeFlag
	queue   *string
	bodyMax int
}

func runItem(c *cmdEnv) int {
	o := c.opts.(*itemOpts)
	if !c.wantArgs(1) {
		return c.usageErrorf("item takes two arguments, the queue directory and an item ID")
	}
	id, err := parseIndex(c.args[0])
	if err != nil {
		return c.usageErrorf("item ID: %v", err)
	}
	qf, err := listQueue(c.dir)
	if err != nil {
		return c.errorf("%v", err)
	}
	c.noteFormat(qf)
	var history []*event
	unattributed := 0
	r := newReplayer(qf, 0, 0, func(ev *event) error {
		switch {
		case ev.touches(id):
			history = append(history, ev)
		case !ev.IDsKnown:
			unattributed++
		}
		return nil
	})
	scanErr := r.run()
	st, stErr := r.state()
	now := o.now.nowFor(st)

	w := c.stdout
	switch {
	case st != nil && st.NextID() == 1:
		return c.errorf("no item %d: the queue has not given any ID yet", id)
	case st != nil && id >= st.NextID():
		return c.errorf("no item %d: the queue has given IDs 1..%d so far", id, st.NextID()-1)
	}
	var it *state.Item
	if st != nil {
		it = st.Item(id)
	}
	if *o.queue != "" {
		if err := checkItemQueue(st, it, history, *o.queue); err != nil {
			return c.errorf("%s: item %d: %v", c.dir, id, err)
		}
	}
	fmt.Fprintf(w, "item %d\n", id)
	field := func(label, format string, args ...any) {
		fmt.Fprintf(w, "  %-11s %s\n", label, clean(fmt.Sprintf(format, args...)))
	}
	switch {
	case it != nil:
		if it.Queue != state.DefaultQueue || hasNamed(st) {
			field("queue", "%s, id %d", itemQueueName(st, it), it.Queue)
		}
		describeItem(field, it, now, bodyText(c.dir, st, it, o.bodyMax))
	case st != nil:
		field("status", "%s", goneStatus(history, r.logFirst))
	default:
		field("status", "not known: the state cannot be rebuilt (%v)", stErr)
	}

	fmt.Fprintf(w, "history\n")
	if len(history) == 0 || history[0].Type != state.TypePut {
		if r.logFirst > 1 {
			fmt.Fprintf(w, "  (records before index %d were compacted away; the snapshot carries what they did)\n", r.logFirst)
		}
	}
	for _, ev := range history {
		fmt.Fprintf(w, "%s\n", formatEvent(ev, o.bodyMax))
	}
	if unattributed > 0 {
		fmt.Fprintf(w, "  (%s before the snapshot could not be tied to an item: their lease records were compacted away)\n",
			plural(unattributed, "record", "records"))
	}
	if scanErr != nil {
		return c.errorf("%v", scanErr)
	}
	return exitOK
}

// describeItem prints a stored item.
func describeItem(field func(label, format string, args ...any), it *state.Item, now int64, body string) {
	switch status := itemStatus(it, now); status {
	case statusReady:
		field("status", "ready since %s (%s)", fmtTime(it.Due), ago(it.Due, now))
	case statusDelayed:
		field("status", "delayed until %s (%s)", fmtTime(it.Due), ago(it.Due, now))
	case state.Leased.String():
		if it.LeaseEnd <= now {
			field("status", "leased (receipt %d) until %s (%s): the queue expires it on its next timer tick or open",
				it.Receipt, fmtTime(it.LeaseEnd), ago(it.LeaseEnd, now))
		} else {
			field("status", "leased (receipt %d) until %s (%s)", it.Receipt, fmtTime(it.LeaseEnd), ago(it.LeaseEnd, now))
		}
	case state.Dead.String():
		field("status", "dead since %s (%s)", fmtTime(it.EndedAt()), ago(it.EndedAt(), now))
	}
	field("attempts", "%d since the put or the last redrive, %s in all", it.Attempts,
		plural(int(it.Deliveries), "delivery", "deliveries"))
	if it.LastError() != "" {
		field("last error", "%s at %s", quote(it.LastError()), fmtTime(it.EndedAt()))
	}
	field("enqueued", "%s", fmtTime(it.EnqueuedAt))
	if it.Deadline() != 0 {
		field("deadline", "%s (%s)", fmtTime(it.Deadline()), ago(it.Deadline(), now))
	}
	if it.Priority != 0 {
		field("priority", "%d", it.Priority)
	}
	if it.Key() != "" {
		field("key", "%s", quote(it.Key()))
	}
	field("body", "%s", body)
	history := it.History()
	if it.Status == state.Leased {
		// The running attempt is no history yet: a leased item's Due is
		// when its lease began.
		history = append(slices.Clone(history), state.Attempt{Start: it.Due})
	}
	if len(history) > 0 {
		field("leases", "the last %d of %s, oldest first (start, end, how it ended):", len(history),
			plural(int(it.Deliveries), "delivery", "deliveries"))
		for _, l := range attemptLines(history) {
			field("", "%s", l)
		}
	}
}

// attemptLines describes an item's attempts, one a line (How 0: the
// running one). The history holds the attempts that did not end in an ack.
func attemptLines(history []state.Attempt) []string {
	var out []string
	for _, a := range history {
		if a.How == 0 {
			out = append(out, fmt.Sprintf("%s, running", fmtTime(a.Start)))
			continue
		}
		l := fmt.Sprintf("%s to %s (%s)  %s", fmtTime(a.Start), fmtTime(a.End), fmtDur(time.Duration(a.End-a.Start)),
			state.TypeName(a.How))
		if a.Error != "" {
			l += ": " + quote(a.Error)
		}
		out = append(out, l)
	}
	return out
}

// checkItemQueue checks --queue against the item's queue: the one it is
// stored in, or, for an item gone, the queues of the records that changed
// it.
func checkItemQueue(st *state.State, it *state.Item, history []*event, name string) error {
	var selErr error
	if st != nil {
		_, selErr = selectQueue(st, name)
	}
	if it != nil {
		if selErr != nil {
			return selErr
		}
		q := st.Queue(it.Queue)
		if name == defaultQueueName && it.Queue == state.DefaultQueue || q != nil && it.Queue != state.DefaultQueue && q.Name() == name {
			return nil
		}
		return fmt.Errorf("it is in %s, not in queue %s", queueRef(q), quote(name))
	}
	for _, ev := range history {
		if ev.Type != state.TypeMove && queueMatch(ev, name) {
			return nil
		}
	}
	if selErr != nil {
		return selErr
	}
	return fmt.Errorf("no record read that changed it is of a queue called %s", quote(name))
}

// goneStatus says how an item that is no longer stored left, from its last
// record.
func goneStatus(history []*event, logFirst uint64) string {
	if len(history) > 0 {
		ev := history[len(history)-1]
		at := fmtTime(ev.Rec.At())
		switch ev.Rec.(type) {
		case *state.Ack:
			return fmt.Sprintf("acked at %s (index %d)", at, ev.Pos.Index)
		case *state.Discard:
			return fmt.Sprintf("discarded at its deadline at %s (index %d)", at, ev.Pos.Index)
		case *state.Delete:
			return fmt.Sprintf("deleted at %s (index %d)", at, ev.Pos.Index)
		case *state.End:
			if ev.Discarded {
				return fmt.Sprintf("discarded at %s (index %d): its deadline came before the retry", at, ev.Pos.Index)
			}
		case *state.Purge:
			return fmt.Sprintf("purged from the dead letters at %s (index %d)", at, ev.Pos.Index)
		case *state.DeleteQueue:
			q := fmt.Sprintf("queue %d", ev.Queue)
			if ev.QueueKnown {
				q = fmt.Sprintf("queue %s (id %d)", quoteName(ev.QueueName), ev.Queue)
			}
			return fmt.Sprintf("deleted with its %s at %s (index %d)", q, at, ev.Pos.Index)
		}
	}
	return fmt.Sprintf("gone: acked, discarded or purged before index %d (compacted away)", logFirst)
}
