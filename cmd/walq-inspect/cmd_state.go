package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"text/tabwriter"

	"github.com/walq/walq/state"
)

var stateCmd = &command{
	name:  "state",
	args:  "DIR",
	short: "the state rebuilt from snapshot and log, at the end or --at an index",
	long: `
Rebuilds the queue's state the way recovery does — the newest snapshot that
verifies, then the log after it — up to the end of the log, or up to --at
INDEX to see what the queue looked like then, and prints every stored item
as a table, or as one JSON document with --json (bodies in full).

Ready and delayed are judged as of --now; with --at and no --now, as of the
time of the record at that index. An index before the oldest snapshot that
the log still reaches can no longer be rebuilt.

Named queues: without --queue every queue's items are listed, with a QUEUE
column when the directory has named queues ("(default)" is the default
queue), and the figures are summed over every queue; with --queue NAME,
the items and figures of that queue alone. The JSON has a "queues" list
(name, id, settings, pause) when the directory has named queues, and each
item of a named queue its "queue" ID.`,
	flags: func(fs *flag.FlagSet) any {
		o := &stateOpts{now: nowFlag(fs), queue: queueFlag(fs)}
		fs.Uint64Var(&o.at, "at", 0, "rebuild the state up to this `index` (0: the end of the log)")
		fs.BoolVar(&o.json, "json", false, "print JSON")
		fs.IntVar(&o.bodyMax, "body-max", defaultBodyMax, "show at most `n` bytes of each body in the table (0: all)")
		return o
	},
	run: runState,
}

type stateOpts struct {
	now     *timeFlag
	queue   *string
	at      uint64
	json    bool
	bodyMax int
}

func runState(c *cmdEnv) int {
	o := c.opts.(*stateOpts)
	if !c.wantArgs(0) {
		return c.usageErrorf("state takes one argument, the queue directory")
	}
	qf, err := listQueue(c.dir)
	if err != nil {
		return c.errorf("%v", err)
	}
	c.noteFormat(qf)
	st, _, err := loadState(qf, o.at)
	if err != nil {
		return c.errorf("%v", err)
	}
	sel, err := selectQueue(st, *o.queue)
	if err != nil {
		return c.errorf("%s: %v", c.dir, err)
	}
	sc := scope{st: st, q: sel}
	now := o.now.ns
	if now == 0 && o.at != 0 {
		now = st.LastTime()
	}
	if now == 0 {
		now = o.now.nowFor(st)
	}
	if o.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(newJSONState(c.dir, sc, now)); err != nil {
			return c.errorf("%v", err)
		}
		return exitOK
	}
	w := c.stdout
	f := factsOf(sc, now)
	fmt.Fprintf(w, "state at index %d (%s), next item ID %d, as of %s\n",
		st.LastLSN(), fmtTime(st.LastTime()), st.NextID(), fmtTime(now))
	switch {
	case sel != nil:
		fmt.Fprintf(w, "scope     %s alone\n", queueRef(sel))
	case hasNamed(st):
		fmt.Fprintf(w, "scope     every queue: %s\n", queueNames(st))
	}
	fmt.Fprintf(w, "items     %s\n", f.itemsLine(sc))
	fmt.Fprintf(w, "keys      %d held by stored items, %d by items gone\n", f.keysOfStored, f.keysInWindows)
	fmt.Fprintf(w, "counters  %s\n", countersLine(sc.counters()))
	items := sc.items()
	if len(items) == 0 {
		return exitOK
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	named := sc.named()
	if named {
		fmt.Fprint(tw, "QUEUE\t")
	}
	fmt.Fprintln(tw, "ID\tSTATUS\tATTEMPTS\tDELIVERIES\tPRIORITY\tWHEN\tKEY\tBODY")
	for _, it := range items {
		key := "-"
		if it.Key() != "" {
			key = quote(it.Key())
		}
		if named {
			fmt.Fprintf(tw, "%s\t", itemQueueName(st, it))
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", it.ID, itemStatus(it, now), it.Attempts, it.Deliveries,
			it.Priority, itemWhen(it, now), key, bodyText(c.dir, st, it, o.bodyMax))
	}
	tw.Flush()
	return exitOK
}

// itemWhen is the time that matters for an item in its status: when it is
// or was due, when its lease ends, when it died.
func itemWhen(it *state.Item, now int64) string {
	var what string
	var t int64
	switch itemStatus(it, now) {
	case statusReady:
		what, t = "due", it.Due
	case statusDelayed:
		what, t = "due", it.Due
	case state.Leased.String():
		what, t = "lease ends", it.LeaseEnd
	case state.Dead.String():
		what, t = "died", it.EndedAt()
	default:
		return "-"
	}
	return fmt.Sprintf("%s %s (%s)", what, fmtTime(t), fmtRel(t, now))
}

type jsonState struct {
	Index    uint64       `json:"index"`
	Time     jsonTime     `json:"time"`
	Now      jsonTime     `json:"now"`
	NextID   uint64       `json:"next_id"`
	Counters jsonCounters `json:"counters"`
	Ready    int          `json:"ready"`
	Delayed  int          `json:"delayed"`
	Leased   int          `json:"leased"`
	Dead     int          `json:"dead"`
	Bytes    int64        `json:"bytes"`
	Keys     int          `json:"keys"`
	Queues   []jsonQueue  `json:"queues,omitempty"`
	Items    []jsonItem   `json:"items"`
}

// jsonQueue is one queue of the directory.
type jsonQueue struct {
	Name        string       `json:"name"` // "" for the default queue
	ID          uint64       `json:"id"`
	Created     jsonTime     `json:"created,omitempty"`
	Settings    jsonSettings `json:"settings"`
	PausedUntil jsonTime     `json:"paused_until,omitempty"`
	// UntilResumed is set for a queue paused until it is resumed.
	UntilResumed bool         `json:"paused_until_resumed,omitempty"`
	Items        int          `json:"items"`
	Leased       int          `json:"leased"`
	Dead         int          `json:"dead"`
	Counters     jsonCounters `json:"counters"`
}

// jsonSettings are a queue's recorded settings (durations in nanoseconds,
// 0: no bound for the maxima).
type jsonSettings struct {
	Visibility  int64 `json:"visibility_ns"`
	MaxAttempts int64 `json:"max_attempts"`
	KeyWindow   int64 `json:"key_window_ns"`
	MaxItems    int64 `json:"max_items"`
	MaxBytes    int64 `json:"max_bytes"`
	MaxInFlight int64 `json:"max_in_flight"`
}

func newJSONQueue(q *state.QueueState) jsonQueue {
	j := jsonQueue{Name: q.Name(), ID: q.ID(), Created: jsonTime(q.Created()), Settings: jsonSettings(q.Settings()),
		Items: q.Len(), Leased: q.Leased(), Dead: q.Gauges().Dead, Counters: jsonCounters(q.Counters())}
	switch u := q.PausedUntil(); u {
	case 0:
	case math.MaxInt64:
		j.UntilResumed = true
	default:
		j.PausedUntil = jsonTime(u)
	}
	return j
}

// jsonCounters is state.Counters with JSON names.
type jsonCounters struct {
	Put          uint64 `json:"put"`
	Delivered    uint64 `json:"delivered"`
	Acked        uint64 `json:"acked"`
	Nacked       uint64 `json:"nacked"`
	Expired      uint64 `json:"expired"`
	DeadLettered uint64 `json:"dead_lettered"`
	Discarded    uint64 `json:"discarded"`
	Redriven     uint64 `json:"redriven"`
	Purged       uint64 `json:"purged"`
	MovedIn      uint64 `json:"moved_in,omitempty"`
	MovedOut     uint64 `json:"moved_out,omitempty"`
}

type jsonItem struct {
	ID     uint64 `json:"id"`
	Queue  uint64 `json:"queue,omitempty"`
	Status string `json:"status"`
	jsonBody
	Key        *jsonString `json:"key,omitempty"`
	Priority   int64       `json:"priority,omitempty"`
	EnqueuedAt jsonTime    `json:"enqueued_at"`
	Due        jsonTime    `json:"due,omitempty"`
	Deadline   jsonTime    `json:"deadline,omitempty"`
	Attempts   int32       `json:"attempts"`
	Deliveries int32       `json:"deliveries"`
	Receipt    uint64      `json:"receipt,omitempty"`
	LeaseEnd   jsonTime    `json:"lease_end,omitempty"`
	LastError  *jsonString `json:"last_error,omitempty"`
	EndedAt    jsonTime    `json:"ended_at,omitempty"`
	BodyError  *jsonString `json:"body_error,omitempty"`
}

func newJSONItem(dir string, st *state.State, it *state.Item, now int64) jsonItem {
	body, berr := storedBody(dir, st, it)
	j := jsonItem{ID: it.ID, Queue: it.Queue, Status: itemStatus(it, now), jsonBody: newJSONBody(body), Priority: it.Priority,
		EnqueuedAt: jsonTime(it.EnqueuedAt), Deadline: jsonTime(it.Deadline()), Attempts: it.Attempts,
		Deliveries: it.Deliveries, Receipt: it.Receipt, LeaseEnd: jsonTime(it.LeaseEnd), EndedAt: jsonTime(it.EndedAt())}
	if berr != nil {
		e := jsonString(berr.Error())
		j.BodyError = &e
	}
	if it.Status == state.Waiting {
		j.Due = jsonTime(it.Due)
	}
	if it.Key() != "" {
		k := jsonString(it.Key())
		j.Key = &k
	}
	if it.LastError() != "" {
		e := jsonString(it.LastError())
		j.LastError = &e
	}
	return j
}

func newJSONState(dir string, sc scope, now int64) jsonState {
	st := sc.st
	f := factsOf(sc, now)
	j := jsonState{Index: st.LastLSN(), Time: jsonTime(st.LastTime()), Now: jsonTime(now), NextID: st.NextID(),
		Counters: jsonCounters(sc.counters()), Ready: f.byStatus[statusReady], Delayed: f.byStatus[statusDelayed],
		Leased: f.byStatus[state.Leased.String()], Dead: f.byStatus[state.Dead.String()], Bytes: sc.bytes(),
		Keys: f.keysOfStored + f.keysInWindows, Items: []jsonItem{}}
	if sc.q != nil || hasNamed(st) {
		for _, q := range sc.queues() {
			j.Queues = append(j.Queues, newJSONQueue(q))
		}
	}
	for _, it := range sc.items() {
		j.Items = append(j.Items, newJSONItem(dir, st, it, now))
	}
	return j
}

// itemQueueName names the queue an item is stored in.
func itemQueueName(st *state.State, it *state.Item) string {
	if q := st.Queue(it.Queue); q != nil {
		return clean(queueName(q))
	}
	return fmt.Sprint(it.Queue)
}
