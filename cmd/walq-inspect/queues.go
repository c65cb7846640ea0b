package main

import (
	"flag"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/walq/walq/state"
)

// Named queues. A directory holds its default queue (ID 0, no name) and
// any number of named queues, each with an incarnation ID, the LSN of the
// record that created it. Every command that shows what queues hold takes
// --queue: absent or "" means the whole directory, defaultQueueName the
// default queue alone, and any other value the named queue of that name.

// defaultQueueName is how the default queue is shown and selected. It can
// be no queue's name: names start with a letter or a digit.
const defaultQueueName = "(default)"

// queueFlagUsage is the usage of --queue, shared by the commands.
const queueFlagUsage = "show only the queue `name` (" + defaultQueueName + ": the default queue; absent or empty: the whole directory)"

// queueFlag adds --queue to a command.
func queueFlag(fs *flag.FlagSet) *string {
	return fs.String("queue", "", queueFlagUsage)
}

// queueName is how a queue is named in output.
func queueName(q *state.QueueState) string {
	if q.ID() == state.DefaultQueue {
		return defaultQueueName
	}
	return q.Name()
}

// queueRef names a queue in a sentence: "queue jobs (id 5)", "the default
// queue".
func queueRef(q *state.QueueState) string {
	if q.ID() == state.DefaultQueue {
		return "the default queue"
	}
	return fmt.Sprintf("queue %s (id %d)", quoteName(q.Name()), q.ID())
}

// quoteName quotes a queue name only when it needs it (a valid name never
// does; one read from a damaged record may).
func quoteName(name string) string {
	if state.CheckQueueName(name) == nil {
		return name
	}
	return quote(name)
}

// hasNamed reports whether the directory holds a named queue; output for a
// directory with only its default queue is as it was before named queues.
func hasNamed(st *state.State) bool { return len(st.Queues()) > 1 }

// queueNames lists the queues of st for an error message.
func queueNames(st *state.State) string {
	var names []string
	for _, q := range st.Queues() {
		names = append(names, queueName(q))
	}
	return strings.Join(names, ", ")
}

// selectQueue resolves --queue against a state: nil for the whole
// directory, else the queue, or an error naming the queues there are.
func selectQueue(st *state.State, name string) (*state.QueueState, error) {
	switch name {
	case "":
		return nil, nil
	case defaultQueueName:
		return st.Default(), nil
	}
	if q := st.QueueByName(name); q != nil {
		return q, nil
	}
	why := ""
	if err := state.CheckQueueName(name); err != nil {
		why = fmt.Sprintf(" (%v)", err)
	}
	return nil, fmt.Errorf("no queue %s in the directory at index %d%s; its queues are %s (%s selects the default queue)",
		quote(name), st.LastLSN(), why, queueNames(st), defaultQueueName)
}

// scope is what a command shows: one queue of a state, or all of them.
type scope struct {
	st *state.State
	q  *state.QueueState // nil: every queue
}

func (s scope) queues() []*state.QueueState {
	if s.q != nil {
		return []*state.QueueState{s.q}
	}
	return s.st.Queues()
}

// has reports whether the item is in the scope.
func (s scope) has(it *state.Item) bool { return s.q == nil || it.Queue == s.q.ID() }

// named reports whether output should say which queue an item is in: the
// scope is the whole directory and it has named queues.
func (s scope) named() bool { return s.q == nil && hasNamed(s.st) }

func (s scope) items() []*state.Item {
	var out []*state.Item
	for _, it := range sortedItems(s.st) {
		if s.has(it) {
			out = append(out, it)
		}
	}
	return out
}

func (s scope) len() int {
	n := 0
	for _, q := range s.queues() {
		n += q.Len()
	}
	return n
}

func (s scope) bytes() int64 {
	var n int64
	for _, q := range s.queues() {
		n += q.Bytes()
	}
	return n
}

func (s scope) counters() state.Counters {
	var c state.Counters
	for _, q := range s.queues() {
		c = c.Add(q.Counters())
	}
	return c
}

// keys counts the keys held: by stored items and by items gone within
// their key window (or not yet pruned).
func (s scope) keys() int {
	n := 0
	for _, q := range s.queues() {
		n += q.Gauges().Keys
	}
	return n
}

func (s scope) dead() int {
	n := 0
	for _, q := range s.queues() {
		n += q.Gauges().Dead
	}
	return n
}

// deadLetters returns up to limit dead letters (0: all), oldest first:
// each queue's in its order, merged by the time they died.
func (s scope) deadLetters(limit int) []state.Item {
	var out []state.Item
	for _, q := range s.queues() {
		out = append(out, q.DeadLetters(limit)...) // the first limit of all are among each queue's first limit
	}
	if len(s.queues()) > 1 {
		sort.SliceStable(out, func(i, j int) bool { return out[i].EndedAt() < out[j].EndedAt() })
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// inQueue is " in queue jobs" for an item when the output names queues.
func (s scope) inQueue(it *state.Item) string {
	if !s.named() {
		return ""
	}
	if q := s.st.Queue(it.Queue); q != nil {
		return " in " + queueShort(q)
	}
	return fmt.Sprintf(" in queue %d", it.Queue)
}

// queueShort is "queue jobs" or "the default queue".
func queueShort(q *state.QueueState) string {
	if q.ID() == state.DefaultQueue {
		return "the default queue"
	}
	return "queue " + quoteName(q.Name())
}

// settingsText describes recorded settings.
func settingsText(set state.Settings) string {
	bound := func(n int64, f func(int64) string) string {
		if n == 0 {
			return "none"
		}
		return f(n)
	}
	count := func(n int64) string { return fmt.Sprint(n) }
	size := func(n int64) string { return fmtSize(n) }
	return fmt.Sprintf("visibility %s, max attempts %d, key window %s, max items %s, max bytes %s, max in flight %s",
		fmtDur(time.Duration(set.Visibility)), set.MaxAttempts, fmtDur(time.Duration(set.KeyWindow)),
		bound(set.MaxItems, count), bound(set.MaxBytes, size), bound(set.MaxInFlight, count))
}

// optionsText describes a queue's recorded options, or says the default
// queue has none recorded.
func optionsText(q *state.QueueState) string {
	if q.ID() == state.DefaultQueue && q.Settings() == (state.Settings{}) {
		return "not recorded: the default queue's options are given by code at Open"
	}
	set := q.Settings()
	set.MaxInFlight = 0 // in its own column
	s := settingsText(set)
	return strings.TrimSuffix(s, ", max in flight none")
}

// pausedText says whether and until when a queue is paused at now.
func pausedText(q *state.QueueState, now int64) string {
	switch u := q.PausedUntil(); {
	case u == 0:
		return "no"
	case u == math.MaxInt64:
		return "until resumed"
	case q.Paused(now):
		return fmt.Sprintf("until %s (%s)", fmtTime(u), ago(u, now))
	default:
		return fmt.Sprintf("no (a pause ended %s, %s)", fmtTime(u), ago(u, now))
	}
}

// inFlightText is the queue's open leases against its cap.
func inFlightText(q *state.QueueState) string {
	if c := q.Settings().MaxInFlight; c > 0 {
		return fmt.Sprintf("%d of %d", q.Leased(), c)
	}
	return fmt.Sprintf("%d, no cap", q.Leased())
}

// pauseText describes a pause-queue record.
func pauseText(r *state.PauseQueue) string {
	switch r.Until {
	case 0:
		return "resume"
	case math.MaxInt64:
		return "pause until resumed"
	}
	return fmt.Sprintf("pause until %s (%s)", fmtRel(r.Until, r.Time), fmtTime(r.Until))
}
