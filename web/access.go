package web

import "net/http"

// Access is what one request may do: reading, and each action, is a bit.
// The host's Options.Access hook gives it per request; the handler checks
// it on the server before every page and every action, so a page that
// hides a button is never what stops an action.
type Access uint8

// The bits of Access, and the usual sets.
const (
	// AccessRead shows the pages, bodies and raw downloads.
	AccessRead Access = 1 << iota
	// AccessRedrive sends dead letters back to ready.
	AccessRedrive
	// AccessPurge drops dead letters for good.
	AccessPurge
	// AccessPause pauses and resumes queues.
	AccessPause
	// AccessBulk applies redrive or purge to every item a filter matches
	// (with AccessRedrive or AccessPurge as well).
	AccessBulk
	// AccessDelete deletes a stored item in any state for good.
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

// ReadOnlyAccess is an Options.Access hook that grants ReadOnly to every
// request.
func ReadOnlyAccess(*http.Request) Access { return ReadOnly }

// action names an action in logs, in forms and in Access.
type action struct {
	name string
	need Access
}

var (
	actRedrive     = action{"redrive", AccessRead | AccessRedrive}
	actPurge       = action{"purge", AccessRead | AccessPurge}
	actPause       = action{"pause", AccessRead | AccessPause}
	actResume      = action{"resume", AccessRead | AccessPause}
	actBulkRedrive = action{"bulk redrive", AccessRead | AccessBulk | AccessRedrive}
	actBulkPurge   = action{"bulk purge", AccessRead | AccessBulk | AccessPurge}
	actDelete      = action{"delete", AccessRead | AccessDelete}
)
