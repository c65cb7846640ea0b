package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
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
	subs  map[chan []patch]struct{} // under hub.mu
	poke  chan struct{}
	stop  chan struct{}
	last  []patch // the latest fragments, for a new subscriber; under hub.mu
	reads int     // summaries read; under hub.mu
}

// subscribe adds a subscriber to the queue's broadcaster, starting it if
// it has none. ok is false once the hub is closed.
func (hb *hub) subscribe(queue string) (chan []patch, bool) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if hb.closed {
		return nil, false
	}
	b := hb.byName[queue]
	if b == nil {
		b = &broadcaster{queue: queue, subs: make(map[chan []patch]struct{}), poke: make(chan struct{}, 1), stop: make(chan struct{})}
		hb.byName[queue] = b
		hb.wg.Add(1)
		go hb.run(b)
	}
	ch := make(chan []patch, 1)
	if b.last != nil {
		ch <- b.last
	}
	b.subs[ch] = struct{}{}
	return ch, true
}

// unsubscribe removes a subscriber; the last one stops the broadcaster.
func (hb *hub) unsubscribe(queue string, ch chan []patch) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	b := hb.byName[queue]
	if b == nil {
		return
	}
	delete(b.subs, ch)
	if len(b.subs) == 0 {
		close(b.stop)
		delete(hb.byName, queue)
	}
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
			for ch := range b.subs {
				select {
				case <-ch: // a slow stream gets the newest only
				default:
				}
				ch <- patches
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
		h.tmpl.ExecuteTemplate(&buf, "liveerror", map[string]string{"Path": path, "Error": err.Error()})
		return []patch{{ID: "live-" + path, HTML: buf.String()}}
	}
	rw := h.row(s, time.Now())
	var out []patch
	for _, name := range []string{"row", "counts"} {
		var buf bytes.Buffer
		if err := h.tmpl.ExecuteTemplate(&buf, name, rw); err != nil {
			continue
		}
		out = append(out, patch{ID: name + "-" + path, HTML: buf.String()})
	}
	return out
}

// events serves the event stream of the queues named by the query (queue,
// once per queue; none: every queue).
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	names := r.URL.Query()["queue"]
	for i, n := range names {
		if n == defaultQueueName {
			names[i] = ""
		}
	}
	if len(names) == 0 {
		sums, err := h.src.Queues()
		if err != nil {
			h.fail(w, r, status(err), err)
			return
		}
		for _, s := range sums {
			names = append(names, s.Name)
		}
	}
	if len(names) > 1000 {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%w: %d queues watched, at most 1000", errBadInput, len(names)))
		return
	}
	merged := make(chan []patch, len(names))
	type sub struct {
		name string
		ch   chan []patch
	}
	var subs []sub
	for _, n := range names {
		ch, ok := h.hub.subscribe(n)
		if !ok {
			break
		}
		subs = append(subs, sub{n, ch})
	}
	defer func() {
		for _, s := range subs {
			h.hub.unsubscribe(s.name, s.ch)
		}
	}()
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	// Merge the queues' subscriptions into one channel, one goroutine per
	// queue watched, so the loop below waits on one channel whatever their
	// number.
	stop := make(chan struct{})
	defer close(stop)
	for _, s := range subs {
		go func(ch chan []patch) {
			for {
				select {
				case p := <-ch:
					select {
					case merged <- p:
					case <-stop:
						return
					}
				case <-stop:
					return
				}
			}
		}(s.ch)
	}
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case p := <-merged:
			data, _ := json.Marshal(p)
			if _, err := fmt.Fprintf(w, "event: patch\ndata: %s\n\n", data); err != nil {
				return
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
