package web

import "net/http"

// Every request asks the dashboard for an Action: to see its frame, to
// read a queue, to act on a queue or on some of its items. Options.Allow
// decides each one on the server, before every page, stream, job and
// action, so a page that hides a button is never what stops an action,
// and a host can scope any of them per queue (or per item). Options.Access
// is the simpler hook: one Access per request, the same for every queue.

// ActionKind is what an Action does.
type ActionKind string

// The kinds of Action.
const (
	// Browse shows the dashboard's frame: its static files, and the
	// overview, whose rows are each a Read of their queue (a queue the
	// request may not read is not listed).
	Browse ActionKind = "browse"
	// Read shows a queue's pages, items, bodies and raw downloads, its
	// live counts and its bulk actions' pages.
	Read ActionKind = "read"
	// Redrive sends dead letters back to ready.
	Redrive ActionKind = "redrive"
	// Purge drops dead letters for good.
	Purge ActionKind = "purge"
	// Pause and Resume pause and resume a queue.
	Pause  ActionKind = "pause"
	Resume ActionKind = "resume"
	// BulkRedrive and BulkPurge apply redrive or purge to every dead
	// letter a filter matches: prepared, confirmed, run, cancelled.
	BulkRedrive ActionKind = "bulk redrive"
	BulkPurge   ActionKind = "bulk purge"
	// Delete deletes a stored item in any state for good.
	Delete ActionKind = "delete"
)

// Action is what a request asks of the dashboard, for Options.Allow to
// decide.
type Action struct {
	Kind ActionKind
	// Queue is the queue it reads or acts on ("" is the default queue);
	// nothing for Browse.
	Queue string
	// Items are the items it names: the item whose page or body is read,
	// the item a per-item action (Redrive, Purge, Delete) acts on. Nil
	// for a queue's lists, a pause, a resume and a bulk action (whose
	// items are what its filter matches), and when a page asks whether to
	// offer a per-item action at all: an Allow that decides per item
	// allows that, and then decides each request with its item.
	Items []uint64
}

// Access is what one request may do, the same on every queue: reading,
// and each kind of action, is a bit. Options.Access gives it per request.
type Access uint8

// The bits of Access, and the usual sets.
const (
	// AccessRead allows Browse and Read.
	AccessRead Access = 1 << iota
	// AccessRedrive allows Redrive.
	AccessRedrive
	// AccessPurge allows Purge.
	AccessPurge
	// AccessPause allows Pause and Resume.
	AccessPause
	// AccessBulk allows BulkRedrive and BulkPurge, with AccessRedrive or
	// AccessPurge as well.
	AccessBulk
	// AccessDelete allows Delete.
	AccessDelete

	// NoAccess refuses every request (403).
	NoAccess Access = 0
	// ReadOnly shows everything and changes nothing.
	ReadOnly = AccessRead
	// FullAccess allows every action.
	FullAccess = AccessRead | AccessRedrive | AccessPurge | AccessPause | AccessBulk | AccessDelete
)

// Has reports whether a holds every bit of b.
func (a Access) Has(b Access) bool { return a&b == b }

// Allows reports whether a allows an action of kind k (no Access allows
// a kind this package does not define).
func (a Access) Allows(k ActionKind) bool {
	need, ok := k.needs()
	return ok && a.Has(need)
}

// needs is the Access an action of kind k needs.
func (k ActionKind) needs() (Access, bool) {
	switch k {
	case Browse, Read:
		return AccessRead, true
	case Redrive:
		return AccessRead | AccessRedrive, true
	case Purge:
		return AccessRead | AccessPurge, true
	case Pause, Resume:
		return AccessRead | AccessPause, true
	case BulkRedrive:
		return AccessRead | AccessBulk | AccessRedrive, true
	case BulkPurge:
		return AccessRead | AccessBulk | AccessPurge, true
	case Delete:
		return AccessRead | AccessDelete, true
	}
	return 0, false
}

// ReadOnlyAccess is an Options.Access hook that grants ReadOnly to every
// request.
func ReadOnlyAccess(*http.Request) Access { return ReadOnly }
