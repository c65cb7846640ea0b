package main

import (
	"sync"

	"github.com/walq/walq/internal/rebuild"
	"github.com/walq/walq/state"
)

// Bodies are read from the log, one positioned read each, checked by
// their CRC, through one reader per directory (read-only, a bounded number
// of files open).
var (
	bodiesMu sync.Mutex
	readers  = make(map[string]*rebuild.Bodies)
)

// storedBody returns the body of it, an item of st rebuilt from the queue
// directory dir.
func storedBody(dir string, st *state.State, it *state.Item) ([]byte, error) {
	bodiesMu.Lock()
	r := readers[dir]
	if r == nil {
		r = rebuild.NewBodies(dir)
		readers[dir] = r
	}
	bodiesMu.Unlock()
	return r.Body(st, it)
}

// bodyText is quoteBody of it's body, or why it cannot be shown.
func bodyText(dir string, st *state.State, it *state.Item, max int) string {
	b, err := storedBody(dir, st, it)
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return quoteBody(b, max)
}
