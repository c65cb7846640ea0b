package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Live updates: each queue has one broadcaster, which reads the queue's
// summary every Options.LiveInterval while anyone watches, renders the
// page fragments that show it and sends them to every open event stream
// that watches the queue. A second tab adds a subscriber, not a read of
// the queue; a tab that is hidden closes its stream (static/live.js), and
// a queue nobody watches is not read at all.

// patch replaces the element of the page with ID by HTML.
type patch struct {
	ID   string `json:"id"`
	HTML string `json:"html"`
}

// hub holds the broadcasters, by queue name.
type hub struct {
	h      *Handler
	mu     sync.Mutex
	byName map[string]*broadcaster
	closed bool
	wg     sync.WaitGroup
}

func newHub(h *Handler) *hub { return &hub{h: h, byName: make(map[string]*broadcaster)} }

// broadcaster watches one queue for its subscribers.
type broadcaster struct {
	queue string
	subs  map[*eventStream]struct{} // under hub.mu
	poke  chan struct{}
	stop  chan struct{}
	last  []patch // the latest fragments, for a new subscriber; under hub.mu
	reads int     // summaries read; under hub.mu
}

// eventStream is one open event stream: the newest fragments of each queue it
// watches, waiting to be written. Broadcasters leave them here and wake
// it; a slow stream gets each queue's newest only. It costs no goroutine
// per queue watched.
type eventStream struct {
	mu      sync.Mutex
	pending map[string][]patch
	wake    chan struct{} // holds one wake-up
}

func newEventStream() *eventStream {
	return &eventStream{pending: make(map[string][]patch), wake: make(chan struct{}, 1)}
}

// offer leaves the queue's newest fragments for the stream.
func (st *eventStream) offer(queue string, p []patch) {
	st.mu.Lock()
	st.pending[queue] = p
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// take returns what waits to be written, and forgets it.
func (st *eventStream) take() [][]patch {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([][]patch, 0, len(st.pending))
	for q, p := range st.pending {
		out = append(out, p)
		delete(st.pending, q)
	}
	return out
}

// subscribe adds st to the queue's broadcaster, starting it if it has
// none. It is false once the hub is closed.
func (hb *hub) subscribe(queue string, st *eventStream) bool {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if hb.closed {
		return false
	}
	b := hb.byName[queue]
	if b == nil {
		b = &broadcaster{queue: queue, subs: make(map[*eventStream]struct{}), poke: make(chan struct{}, 1), stop: make(chan struct{})}
		hb.byName[queue] = b
		hb.wg.Add(1)
		go hb.run(b)
	}
	if b.last != nil {
		st.offer(queue, b.last)
	}
	b.subs[st] = struct{}{}
	return true
}

// unsubscribe removes st from the queue's broadcaster; the last one stops
// it.
func (hb *hub) unsubscribe(queue string, st *eventStream) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	b := hb.byName[queue]
	if b == nil {
		return
	}
	delete(b.subs, st)
	if len(b.subs) == 0 {
		close(b.stop)
		delete(hb.byName, queue)
	}
}

// broadcasters counts the queues being watched.
func (hb *hub) broadcasters() int {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return len(hb.byName)
}

// poke makes the queue's broadcaster look now (after an action).
func (hb *hub) poke(queue string) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if b := hb.byName[queue]; b != nil {
		select {
		case b.poke <- struct{}{}:
		default:
		}
	}
}

// close stops every broadcaster and ends every stream.
func (hb *hub) close() {
	hb.mu.Lock()
	hb.closed = true
	for name, b := range hb.byName {
		close(b.stop)
		delete(hb.byName, name)
	}
	hb.mu.Unlock()
	hb.wg.Wait()
}

func (hb *hub) run(b *broadcaster) {
	defer hb.wg.Done()
	every := hb.h.opts.LiveInterval
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		patches := hb.h.fragments(b.queue)
		hb.mu.Lock()
		b.reads++
		if !samePatches(b.last, patches) {
			for st := range b.subs {
				st.offer(b.queue, patches)
			}
			b.last = patches
		}
		hb.mu.Unlock()
		select {
		case <-b.stop:
			return
		case <-t.C:
		case <-b.poke:
		}
	}
}

func samePatches(a, b []patch) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fragments renders the parts of the pages that show the queue's summary.
func (h *Handler) fragments(queue string) []patch {
	path := queuePath(queue)
	s, err := h.src.Queue(queue)
	if err != nil {
		var buf bytes.Buffer
		h.tmpl.ExecuteTemplate(&buf, "liveerror", map[string]string{"Path": path, "Error": h.shown(nil, err)})
		return []patch{{ID: "live-" + url.PathEscape(path), HTML: buf.String()}}
	}
	rw := h.row(s, time.Now())
	var out []patch
	for _, name := range []string{"row", "counts"} {
		var buf bytes.Buffer
		if err := h.tmpl.ExecuteTemplate(&buf, name, rw); err != nil {
			continue
		}
		out = append(out, patch{ID: name + "-" + url.PathEscape(path), HTML: buf.String()})
	}
	return out
}

// events serves the event stream of the queues named by the query (queue,
// once per queue; none: every queue). A name the source does not have is
// refused, before anything is watched; at most Options.MaxEventStreams
// streams are open at once.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	var names []string
	seen := make(map[string]bool)
	for _, n := range r.URL.Query()["queue"] {
		if n == defaultQueueName {
			n = ""
		}
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	if len(names) > maxWatched {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%w: %d queues watched, at most %d", errBadInput, len(names), maxWatched))
		return
	}
	for _, n := range names {
		// Asked first, as a queue's page asks: a name the request may not
		// read is refused the same whether the source has it or not.
		if !h.allows(r, Action{Kind: Read, Queue: n}) {
			h.fail(w, r, http.StatusForbidden, fmt.Errorf("queue %s is not open to you", queueLabel(n)))
			return
		}
		if _, err := h.src.Queue(n); err != nil {
			h.fail(w, r, status(err), err)
			return
		}
	}
	if len(names) == 0 {
		sums, err := h.src.Queues()
		if err != nil {
			h.fail(w, r, status(err), err)
			return
		}
		for _, s := range sums {
			if h.allows(r, Action{Kind: Read, Queue: s.Name}) {
				names = append(names, s.Name)
			}
		}
	}
	if len(names) > maxWatched {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%w: %d queues watched, at most %d", errBadInput, len(names), maxWatched))
		return
	}
	if !h.streams.TryAcquire() {
		w.Header().Set("Retry-After", "5")
		h.fail(w, r, http.StatusServiceUnavailable, shownErr{fmt.Errorf("%d live streams are open, the most this dashboard serves at once", h.opts.MaxEventStreams)})
		return
	}
	defer h.streams.Release()
	st := newEventStream()
	var watched []string
	defer func() {
		for _, n := range watched {
			h.hub.unsubscribe(n, st)
		}
	}()
	for _, n := range names {
		if !h.hub.subscribe(n, st) {
			return
		}
		watched = append(watched, n)
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no") // a proxy passes each event on as it comes
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-st.wake:
			for _, p := range st.take() {
				data, _ := json.Marshal(p)
				if _, err := fmt.Fprintf(w, "event: patch\ndata: %s\n\n", data); err != nil {
					return
				}
			}
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": still here\n\n"); err != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-h.done:
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// maxWatched bounds the queues one event stream watches.
const maxWatched = 1000
