package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/walq/walq/state"
)

// maxPutItemsShown bounds how many items of a put (a PutBatch is one record)
// a text line lists.
const maxPutItemsShown = 8

// formatEvent renders a record as one line (item's history):
//
//	INDEX  TIME                      TYPE        DETAILS
//	   12  2026-01-02T03:04:05.000Z  lease       item 3 attempt 1 until +30s
//
// Times in details are relative to the record's own time.
func formatEvent(ev *event, bodyMax int) string {
	return fmt.Sprintf("%7d  %s  %-10s  %s", ev.Pos.Index, eventTime(ev), state.TypeName(ev.Type), eventText(ev, bodyMax))
}

// logHeader heads log's text output; formatLogLine fills its columns.
var logHeader = fmt.Sprintf("%7s  %-24s  %-10s  %5s  %7s  %8s  %8s  %s",
	"LSN", "TIME", "TYPE", "QUEUE", "SEGMENT", "FRAME", "BODY", "DETAILS")

// formatLogLine renders a record as one line of log, with where it is: its
// queue, its segment (by the first LSN the segment's name gives), the
// offset of its frame in the segment and that of its body (format 1: both
// the offset of its entry).
func formatLogLine(ev *event, bodyMax int) string {
	return fmt.Sprintf("%7d  %s  %-10s  %5s  %7s  %8d  %8d  %s", ev.Pos.Index, eventTime(ev), state.TypeName(ev.Type),
		queueColumn(ev), segmentNumber(ev.Pos.File), ev.Pos.Frame, ev.Pos.Offset, eventText(ev, bodyMax))
}

// queueColumn names the queue a record acts on: 0 for the default queue,
// a named queue by its name when it is known and by its ID otherwise; a
// create-queue record by the queue it creates.
func queueColumn(ev *event) string {
	switch {
	case ev.queueID() == state.DefaultQueue:
		return "0"
	case ev.QueueKnown:
		return clean(quoteName(ev.QueueName))
	}
	return fmt.Sprint(ev.Queue)
}

// targetRef names the queue a move goes into.
func targetRef(ev *event, target uint64) string {
	switch {
	case target == state.DefaultQueue:
		return "the default queue"
	case ev.TargetKnown:
		return fmt.Sprintf("queue %s (id %d)", quoteName(ev.TargetName), target)
	}
	return fmt.Sprintf("queue %d", target)
}

// segmentNumber shortens a segment's name to the first LSN it gives:
// "00000000000000000028.seg" is "28".
func segmentNumber(name string) string {
	n := strings.TrimLeft(name, "0")
	if i := strings.IndexFunc(n, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		n = n[:i]
	}
	if n == "" {
		return fileName(name)
	}
	return n
}

func eventTime(ev *event) string {
	if ev.Rec == nil {
		return fmt.Sprintf("%-24s", "-")
	}
	return fmtTime(ev.Rec.At())
}

func eventText(ev *event, bodyMax int) string {
	if ev.Rec == nil {
		return fmt.Sprintf("body does not decode: %s", ev.Err)
	}
	return eventDetails(ev, bodyMax)
}

// itemRef names the item a single-item record changes.
func itemRef(ev *event) string {
	if ev.IDsKnown && len(ev.IDs) == 1 {
		return fmt.Sprintf("item %d", ev.IDs[0])
	}
	return "item ?"
}

// itemsRef names the items a many-item record changes.
func itemsRef(ev *event, ids []uint64) string {
	if !ev.IDsKnown {
		return "items ?"
	}
	if len(ids) == 1 {
		return fmt.Sprintf("item %d", ids[0])
	}
	return "items " + fmtIDs(ids)
}

func eventDetails(ev *event, bodyMax int) string {
	var b strings.Builder
	switch r := ev.Rec.(type) {
	case *state.Put:
		for i, n := range r.Items {
			if i == maxPutItemsShown {
				fmt.Fprintf(&b, "; and %d more", len(r.Items)-i)
				break
			}
			if i > 0 {
				b.WriteString("; ")
			}
			if ev.IDsKnown {
				fmt.Fprintf(&b, "item %d ", ev.IDs[i])
			} else {
				b.WriteString("item ? ")
			}
			b.WriteString(quoteBody(n.Body, bodyMax))
			if n.Key != "" {
				fmt.Fprintf(&b, " key %s", quote(n.Key))
			}
			if n.Priority != 0 {
				fmt.Fprintf(&b, " priority %d", n.Priority)
			}
			if n.Due != r.Time {
				fmt.Fprintf(&b, " due %s", fmtRel(n.Due, r.Time))
			}
			if n.Deadline != 0 {
				fmt.Fprintf(&b, " deadline %s", fmtRel(n.Deadline, r.Time))
			}
		}
	case *state.Lease:
		b.WriteString(itemRef(ev))
		if ev.Attempt != 0 {
			fmt.Fprintf(&b, " attempt %d", ev.Attempt)
		}
		fmt.Fprintf(&b, " until %s", fmtRel(r.LeaseEnd, r.Time))
	case *state.Extend:
		fmt.Fprintf(&b, "%s receipt %d until %s", itemRef(ev), r.Receipt, fmtRel(r.LeaseEnd, r.Time))
	case *state.Ack:
		fmt.Fprintf(&b, "%s receipt %d", itemRef(ev), r.Receipt)
	case *state.End:
		fmt.Fprintf(&b, "%s receipt %d", itemRef(ev), r.Receipt)
		if r.Cause != "" {
			fmt.Fprintf(&b, " cause %s", quote(r.Cause))
		}
		switch {
		case r.Dead:
			b.WriteString(": dead letter")
		case ev.Discarded:
			b.WriteString(": discarded, its deadline comes before the retry")
		default:
			fmt.Fprintf(&b, ": retry %s", fmtRel(r.Due, r.Time))
		}
	case *state.Discard:
		fmt.Fprintf(&b, "%s: deadline reached", itemsRef(ev, r.IDs))
	case *state.Redrive:
		b.WriteString(itemsRef(ev, r.IDs))
	case *state.Delete:
		b.WriteString(itemsRef(ev, r.IDs))
	case *state.Purge:
		if r.All {
			b.WriteString("all dead letters")
			if ev.IDsKnown && len(ev.IDs) > 0 {
				fmt.Fprintf(&b, ": %s", itemsRef(ev, ev.IDs))
			}
		} else {
			b.WriteString(itemsRef(ev, r.IDs))
		}
	case *state.CreateQueue:
		fmt.Fprintf(&b, "queue %s id %d: %s", quoteName(r.Name), ev.Pos.Index, settingsText(r.Settings))
		if ev.Earlier != 0 {
			fmt.Fprintf(&b, "; a new incarnation of the name, whose last one (id %d) was deleted", ev.Earlier)
		}
	case *state.SetQueue:
		b.WriteString(settingsText(r.Settings))
	case *state.PauseQueue:
		b.WriteString(pauseText(r))
	case *state.DeleteQueue:
		switch {
		case !ev.IDsKnown:
			b.WriteString("with its items")
		case len(ev.IDs) == 0:
			b.WriteString("with no items")
		default:
			fmt.Fprintf(&b, "with %s", itemsRef(ev, ev.IDs))
		}
		if r.Force {
			b.WriteString(", forced")
			if ev.Leased >= 0 {
				fmt.Fprintf(&b, " (%s open)", plural(ev.Leased, "lease", "leases"))
			}
		}
	case *state.Move:
		fmt.Fprintf(&b, "%s into %s", itemsRef(ev, r.IDs), targetRef(ev, r.Target))
	case *state.Relocate:
		n := 0
		for _, it := range r.Items {
			n += len(it.Body)
		}
		fmt.Fprintf(&b, "bodies of %s copied forward (%d B)", itemsRef(ev, ev.IDs), n)
	}
	return b.String()
}

// jsonEvent is a record as a JSON line. Optional fields are left out when
// they do not apply or are not known; "item"/"items" are left out when the
// items cannot be told (see event.IDsKnown).
type jsonEvent struct {
	Index    uint64        `json:"index"`
	Queue    uint64        `json:"queue"`
	Segment  string        `json:"segment"`
	Frame    int64         `json:"frame"`  // offset of the record's frame in the segment
	Offset   int64         `json:"offset"` // offset of the record's body in the segment
	Type     string        `json:"type"`
	Time     jsonTime      `json:"time,omitempty"`
	Item     *uint64       `json:"item,omitempty"`
	Items    []uint64      `json:"items,omitempty"`
	Receipt  uint64        `json:"receipt,omitempty"`
	Attempt  int32         `json:"attempt,omitempty"`
	LeaseEnd jsonTime      `json:"lease_end,omitempty"`
	Cause    *jsonString   `json:"cause,omitempty"`
	Due      jsonTime      `json:"due,omitempty"`
	Outcome  string        `json:"outcome,omitempty"` // of a lease ending: "retry", "dead" or "discarded"
	All      bool          `json:"all,omitempty"`     // purge of every dead letter
	Put      []jsonPutItem `json:"put,omitempty"`
	Error    jsonString    `json:"error,omitempty"` // the body does not decode

	// Named queues. QueueName is the name of the queue the record acts on
	// (left out for the default queue and when not known); of a
	// create-queue record, the queue it creates, whose ID is the index.
	QueueName *jsonString   `json:"queue_name,omitempty"`
	Settings  *jsonSettings `json:"settings,omitempty"` // create-queue, set-queue
	// Of a pause-queue record: "pause" with "until", "pause-until-resumed"
	// or "resume".
	Pause      string      `json:"pause,omitempty"`
	Until      jsonTime    `json:"until,omitempty"`
	Force      bool        `json:"force,omitempty"`  // delete-queue
	Target     *uint64     `json:"target,omitempty"` // move: the queue it moves into
	TargetName *jsonString `json:"target_name,omitempty"`
}

type jsonPutItem struct {
	ID *uint64 `json:"id,omitempty"`
	jsonBody
	Due      jsonTime    `json:"due"`
	Deadline jsonTime    `json:"deadline,omitempty"`
	Priority int64       `json:"priority,omitempty"`
	Key      *jsonString `json:"key,omitempty"`
}

func newJSONEvent(ev *event) jsonEvent {
	j := jsonEvent{Index: ev.Pos.Index, Queue: ev.Queue, Segment: ev.Pos.File, Frame: ev.Pos.Frame, Offset: ev.Pos.Offset,
		Type: state.TypeName(ev.Type)}
	if ev.QueueKnown && ev.QueueName != "" {
		n := jsonString(ev.QueueName)
		j.QueueName = &n
	}
	if ev.Rec == nil {
		j.Error = jsonString(ev.Err.Error())
		return j
	}
	j.Time = jsonTime(ev.Rec.At())
	single := func() {
		if ev.IDsKnown && len(ev.IDs) == 1 {
			id := ev.IDs[0]
			j.Item = &id
		}
	}
	many := func() {
		if ev.IDsKnown {
			j.Items = ev.IDs
		}
	}
	switch r := ev.Rec.(type) {
	case *state.Put:
		for i, n := range r.Items {
			p := jsonPutItem{jsonBody: newJSONBody(n.Body), Due: jsonTime(n.Due), Deadline: jsonTime(n.Deadline),
				Priority: n.Priority}
			if ev.IDsKnown {
				id := ev.IDs[i]
				p.ID = &id
			}
			if n.Key != "" {
				k := jsonString(n.Key)
				p.Key = &k
			}
			j.Put = append(j.Put, p)
		}
	case *state.Lease:
		single()
		j.Attempt, j.LeaseEnd = ev.Attempt, jsonTime(r.LeaseEnd)
	case *state.Extend:
		single()
		j.Receipt, j.LeaseEnd = r.Receipt, jsonTime(r.LeaseEnd)
	case *state.Ack:
		single()
		j.Receipt = r.Receipt
	case *state.End:
		single()
		j.Receipt = r.Receipt
		if r.Cause != "" {
			c := jsonString(r.Cause)
			j.Cause = &c
		}
		switch {
		case r.Dead:
			j.Outcome = "dead"
		case ev.Discarded:
			j.Outcome = "discarded"
		default:
			j.Outcome, j.Due = "retry", jsonTime(r.Due)
		}
	case *state.Discard, *state.Redrive, *state.Delete:
		many()
	case *state.Purge:
		j.All = r.All
		many()
	case *state.CreateQueue:
		set := jsonSettings(r.Settings)
		j.Settings = &set
	case *state.SetQueue:
		set := jsonSettings(r.Settings)
		j.Settings = &set
	case *state.PauseQueue:
		switch r.Until {
		case 0:
			j.Pause = "resume"
		case math.MaxInt64:
			j.Pause = "pause-until-resumed"
		default:
			j.Pause, j.Until = "pause", jsonTime(r.Until)
		}
	case *state.DeleteQueue:
		j.Force = r.Force
		many()
	case *state.Move:
		target := r.Target
		j.Target = &target
		if ev.TargetKnown && ev.TargetName != "" {
			n := jsonString(ev.TargetName)
			j.TargetName = &n
		}
		many()
	case *state.Relocate:
		many()
	}
	return j
}
