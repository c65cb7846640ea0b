package main

import (
	"encoding/json"
	"flag"
	"fmt"
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
the log still reaches can no longer be rebuilt.`,
	flags: func(fs *flag.FlagSet) any {
		o := &stateOpts{now: nowFlag(fs)}
		fs.Uint64Var(&o.at, "at", 0, "rebuild the state up to this `index` (0: the end of the log)")
		fs.BoolVar(&o.json, "json", false, "print JSON")
		fs.IntVar(&o.bodyMax, "body-max", defaultBodyMax, "show at most `n` bytes of each body in the table (0: all)")
		return o
	},
	run: runState,
}

type stateOpts struct {
	now     *timeFlag
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
	now := o.now.ns
	if now == 0 && o.at != 0 {
		now = st.LastTime()
	}
	if now == 0 {
		now = o.now.now()
	}
	if o.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(newJSONState(st, now)); err != nil {
			return c.errorf("%v", err)
		}
		return exitOK
	}
	w := c.stdout
	f := factsOf(st, now)
	fmt.Fprintf(w, "state at index %d (%s), next item ID %d, as of %s\n",
		st.LastLSN(), fmtTime(st.LastTime()), st.NextID(), fmtTime(now))
	fmt.Fprintf(w, "items     %s\n", f.itemsLine(st))
	fmt.Fprintf(w, "keys      %d held by stored items, %d by items gone\n", f.keysOfStored, f.keysInWindows)
	fmt.Fprintf(w, "counters  %s\n", countersLine(st.Counters()))
	items := sortedItems(st)
	if len(items) == 0 {
		return exitOK
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tATTEMPTS\tDELIVERIES\tPRIORITY\tWHEN\tKEY\tBODY")
	for _, it := range items {
		key := "-"
		if it.Key != "" {
			key = quote(it.Key)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", it.ID, itemStatus(it, now), it.Attempts, it.Deliveries,
			it.Priority, itemWhen(it, now), key, quoteBody(it.Body, o.bodyMax))
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
		what, t = "died", it.EndedAt
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
	Items    []jsonItem   `json:"items"`
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
}

func newJSONItem(it *state.Item, now int64) jsonItem {
	j := jsonItem{ID: it.ID, Status: itemStatus(it, now), jsonBody: newJSONBody(it.Body), Priority: it.Priority,
		EnqueuedAt: jsonTime(it.EnqueuedAt), Deadline: jsonTime(it.Deadline), Attempts: it.Attempts,
		Deliveries: it.Deliveries, Receipt: it.Receipt, LeaseEnd: jsonTime(it.LeaseEnd), EndedAt: jsonTime(it.EndedAt)}
	if it.Status == state.Waiting {
		j.Due = jsonTime(it.Due)
	}
	if it.Key != "" {
		k := jsonString(it.Key)
		j.Key = &k
	}
	if it.LastError != "" {
		e := jsonString(it.LastError)
		j.LastError = &e
	}
	return j
}

func newJSONState(st *state.State, now int64) jsonState {
	f := factsOf(st, now)
	j := jsonState{Index: st.LastLSN(), Time: jsonTime(st.LastTime()), Now: jsonTime(now), NextID: st.NextID(),
		Counters: jsonCounters(st.Counters()), Ready: f.byStatus[statusReady], Delayed: f.byStatus[statusDelayed],
		Leased: f.byStatus[state.Leased.String()], Dead: f.byStatus[state.Dead.String()], Bytes: st.Bytes(),
		Keys: f.keysOfStored + f.keysInWindows, Items: []jsonItem{}}
	for _, it := range sortedItems(st) {
		j.Items = append(j.Items, newJSONItem(it, now))
	}
	return j
}
