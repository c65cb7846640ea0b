package web

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/walq/walq"
)

// Options configure a Handler. The zero value serves a read-only
// dashboard.
type Options struct {
	// Allow decides each Action a request asks for: to see the
	// dashboard's frame, to read a queue, to act on a queue or on some of
	// its items. It is asked on the server before every page, stream,
	// job and action, and the pages offer only what it allows. Set Allow
	// or Access, not both.
	Allow func(r *http.Request, a Action) bool
	// Access is the simpler hook: what a request may do, the same on
	// every queue [ReadOnlyAccess unless Allow is set]. A source that is
	// not an Actor allows no action whatever either says.
	Access func(r *http.Request) Access
	// FormatBody, when set, gives the bytes shown and downloaded for an
	// item's body: a formatter (indent JSON, decode a protocol buffer) or
	// a redactor. It stands between a reader and the stored bytes
	// everywhere: every body the dashboard serves (raw downloads
	// included) goes through it, a search in bodies (body=1), and so a
	// bulk action's count, match what it returns, and the lists show no
	// stored length. What it returns is shown escaped, like any body.
	FormatBody func(queue string, item walq.ItemView, body []byte) []byte
	// BodyCut is how many bytes of a body an item page shows [4 KiB];
	// the rest is cut, with the full length given.
	BodyCut int
	// Title heads every page ["walq"].
	Title string
	// LiveInterval is how often a watched queue is read for the pages'
	// live updates [1s].
	LiveInterval time.Duration
	// Hosts are the host names a request may name in its Host header
	// (the port aside), besides IP addresses and localhost, which are
	// always allowed [none]. Any other name is refused with 421: a page
	// of another site cannot reach the dashboard by pointing a name it
	// controls at the service's address (DNS rebinding). Behind a proxy
	// or under a name of its own, list the name; "*" allows any host (for
	// a proxy that checks it).
	Hosts []string
	// MaxEventStreams bounds the live-update streams open at once (a
	// page that shows live counts holds one) [100]; past it a stream is
	// refused with 503 and the page still reads without live updates.
	MaxEventStreams int
	// Logger is where the handler logs the errors a page does not show
	// [slog.Default()]: a failure of the source (an unreadable segment, a
	// failed queue) shows the reader only what kind of failure it was and
	// a reference to its log line, never the error's text, which can name
	// the server's files.
	Logger *slog.Logger
}

// Handler serves the dashboard: an http.Handler to mount under any path
// prefix (with http.StripPrefix; links follow the prefix the request came
// through). Close stops its live updates and its bulk actions.
type Handler struct {
	src   Source
	actor Actor // nil for a read-only source
	opts  Options
	tmpl  *template.Template
	mux   *http.ServeMux
	h     http.Handler // mux behind the cross-origin protection
	hub   *hub
	// streams counts the open event streams, up to MaxEventStreams.
	streams *limiter
	jobs    *jobs
	rates   *rates

	closeOnce sync.Once
	done      chan struct{}
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New returns a Handler over src.
func New(src Source, opts Options) (*Handler, error) {
	if src == nil {
		return nil, errors.New("web: New with a nil Source")
	}
	switch {
	case opts.Allow != nil && opts.Access != nil:
		return nil, errors.New("web: New with both Options.Allow and Options.Access: set one")
	case opts.Allow == nil && opts.Access == nil:
		opts.Access = ReadOnlyAccess
	}
	if opts.BodyCut <= 0 {
		opts.BodyCut = 4 << 10
	}
	if opts.LiveInterval <= 0 {
		opts.LiveInterval = time.Second
	}
	if opts.MaxEventStreams <= 0 {
		opts.MaxEventStreams = 100
	}
	if opts.Title == "" {
		opts.Title = "walq"
	}
	tmpl, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("web: templates: %w", err)
	}
	h := &Handler{src: src, opts: opts, tmpl: tmpl, mux: http.NewServeMux(), done: make(chan struct{})}
	if a, ok := src.(Actor); ok {
		h.actor = a
	}
	h.rates = newRates()
	h.hub = newHub(h)
	h.streams = &limiter{max: opts.MaxEventStreams}
	h.jobs = newJobs()
	h.routes()
	cop := http.NewCrossOriginProtection()
	h.h = cop.Handler(h.mux)
	return h, nil
}

// Close stops the live updates (every open event stream ends) and waits
// for bulk actions in progress to stop.
func (h *Handler) Close() error {
	h.closeOnce.Do(func() {
		close(h.done)
		h.hub.close()
		h.jobs.wait()
	})
	return nil
}

// ServeHTTP serves one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !hostAllowed(r.Host, h.opts.Hosts) {
		http.Error(w, fmt.Sprintf("this dashboard does not answer requests for host %q (web.Options.Hosts lists the names it answers besides IP addresses and localhost)", r.Host), http.StatusMisdirectedRequest)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", pageCSP)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "same-origin")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Cache-Control", "no-store")
	h.h.ServeHTTP(&mountWriter{ResponseWriter: w, base: base(r)}, r)
}

// mountWriter puts the mount prefix in front of every redirect's path: the
// handlers, and the mux's own redirects (a queue's page asked for without
// its trailing slash, a path to clean), write paths from the dashboard's
// root, which the browser must reach under the prefix.
type mountWriter struct {
	http.ResponseWriter
	base string
}

func (m *mountWriter) WriteHeader(code int) {
	if code >= 300 && code < 400 {
		if loc := m.Header().Get("Location"); strings.HasPrefix(loc, "/") && !strings.HasPrefix(loc, "//") {
			m.Header().Set("Location", m.base+loc)
		}
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *mountWriter) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// Flush lets the event stream reach the browser as it is written.
func (m *mountWriter) Flush() {
	if f, ok := m.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// pageCSP allows the dashboard's own script, styles and event stream and
// nothing else: no inline script, no other host, no framing.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// rawCSP is the policy of a raw body download: should a browser render it
// after all, it runs sandboxed, with no script and no origin.
const rawCSP = "sandbox; default-src 'none'"

func (h *Handler) routes() {
	static, _ := fs.Sub(staticFS, "static")
	files := http.FileServerFS(static)
	m := h.mux
	m.Handle("GET /static/", h.browse(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		http.StripPrefix("/static", files).ServeHTTP(w, r)
	}))
	m.Handle("GET /{$}", h.browse(h.overview))
	m.Handle("GET /events", h.browse(h.events))
	m.Handle("GET /q/{queue}/{$}", h.read(h.queuePage))
	m.Handle("GET /q/{queue}/head", h.read(h.headPage))
	m.Handle("GET /q/{queue}/item/{id}", h.read(h.itemPage))
	m.Handle("GET /q/{queue}/item/{id}/raw", h.read(h.rawBody))
	m.Handle("GET /q/{queue}/jobs/{job}", h.read(h.jobPage))
	m.Handle("POST /q/{queue}/redrive", h.read(h.redrive)) // onItems asks with the item
	m.Handle("POST /q/{queue}/purge", h.read(h.purge))     // onItems asks with the item
	m.Handle("POST /q/{queue}/delete", h.read(h.delete))   // onItems asks with the item
	m.Handle("POST /q/{queue}/pause", h.act(Pause, h.pause))
	m.Handle("POST /q/{queue}/resume", h.act(Resume, h.resume))
	m.Handle("POST /q/{queue}/bulk", h.read(h.bulkPrepare))
	m.Handle("POST /q/{queue}/jobs/{job}/run", h.read(h.bulkRun))
	m.Handle("POST /q/{queue}/jobs/{job}/cancel", h.read(h.bulkCancel))
}

// allows says whether r may take a.
func (h *Handler) allows(r *http.Request, a Action) bool {
	if h.opts.Allow != nil {
		return h.opts.Allow(r, a)
	}
	return h.opts.Access(r).Allows(a.Kind)
}

// browse guards the dashboard's frame.
func (h *Handler) browse(fn http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.allows(r, Action{Kind: Browse}) {
			h.fail(w, r, http.StatusForbidden, errors.New("this dashboard is not open to you"))
			return
		}
		fn(w, r)
	})
}

// read guards a queue's page: the request must be allowed to read the
// queue its path names (and the item, when it names one).
func (h *Handler) read(fn func(w http.ResponseWriter, r *http.Request, queue string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queue, err := queueParam(r)
		if err != nil {
			h.fail(w, r, http.StatusNotFound, err)
			return
		}
		a := Action{Kind: Read, Queue: queue}
		if id, err := strconv.ParseUint(r.PathValue("id"), 10, 64); err == nil {
			a.Items = []uint64{id}
		}
		if !h.allows(r, a) {
			h.fail(w, r, http.StatusForbidden, fmt.Errorf("queue %s is not open to you", queueLabel(queue)))
			return
		}
		fn(w, r, queue)
	})
}

// act guards an action on the queue the path names: the source must be
// an Actor, and the request allowed to take it. (A per-item action is
// guarded by read, then asked with its item by onItems.)
func (h *Handler) act(kind ActionKind, fn func(w http.ResponseWriter, r *http.Request, queue string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queue, err := queueParam(r)
		if err != nil {
			h.fail(w, r, http.StatusNotFound, err)
			return
		}
		if err := h.allowed(r, Action{Kind: kind, Queue: queue}); err != nil {
			h.fail(w, r, http.StatusForbidden, err)
			return
		}
		fn(w, r, queue)
	})
}

// allowed says why r may not take a, or returns nil.
func (h *Handler) allowed(r *http.Request, a Action) error {
	switch {
	case h.actor == nil:
		return fmt.Errorf("%s refused: this dashboard is read-only", a.Kind)
	case !h.allows(r, a):
		return fmt.Errorf("%s refused: you may not %s here", a.Kind, a.Kind)
	}
	return nil
}

// defaultQueueName stands for the default queue (whose name is "") in
// paths: queue names start with a letter or digit, so it names no other.
const defaultQueueName = "_default"

func queuePath(name string) string {
	if name == "" {
		return defaultQueueName
	}
	return name
}

func queueParam(r *http.Request) (string, error) {
	name := r.PathValue("queue")
	if name == defaultQueueName {
		return "", nil
	}
	if name == "" || strings.ContainsAny(name, "/?#") {
		return "", fmt.Errorf("%w: %q", ErrUnknownQueue, name)
	}
	return name, nil
}

// base is the path prefix the dashboard is mounted under, from the
// request as it arrived and as the handler sees it ("" at the root).
func base(r *http.Request) string {
	full := r.RequestURI
	if i := strings.IndexByte(full, '?'); i >= 0 {
		full = full[:i] // a request target has no fragment: a "#" is the path's
	}
	if p := r.URL.EscapedPath(); strings.HasSuffix(full, p) {
		return full[:len(full)-len(p)]
	}
	// The request spelled its path otherwise than Go escapes it (a "|"
	// or "^" sent as is): compare unescaped, and cut the prefix from the
	// path as it arrived at the slash that ends it.
	dec, err := url.PathUnescape(full)
	if err != nil || !strings.HasSuffix(dec, r.URL.Path) {
		return ""
	}
	prefix := dec[:len(dec)-len(r.URL.Path)]
	slashes := strings.Count(prefix, "/")
	at := -1
	for i := 0; i < len(full) && slashes >= 0; i++ {
		if full[i] == '/' {
			if slashes == 0 {
				at = i
				break
			}
			slashes--
		}
	}
	if at < 0 {
		return ""
	}
	if got, err := url.PathUnescape(full[:at]); err != nil || got != prefix {
		return ""
	}
	return full[:at]
}

// fail answers with an error page.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	msg := err.Error() // a refusal of the request says why
	if code >= http.StatusInternalServerError {
		msg = h.shown(r, err)
	}
	h.renderCode(w, r, code, "error", map[string]any{"Code": code, "Status": http.StatusText(code), "Error": msg})
}

// shown is what a page says of err: the text of an error about the
// request (bad input, an unknown queue or item, a refusal the dashboard
// makes itself: shownErr), a fixed sentence for a queue that is closed,
// deleted or failed, and for any other failure of the source only a
// reference to the log line that holds its text (which can name the
// server's paths).
func (h *Handler) shown(r *http.Request, err error) string {
	var own shownErr
	what := "the source failed"
	// A failed, closed or deleted queue first: an error that is also one
	// about the request (a failure wrapping ErrNotFound, say) still shows
	// only its kind.
	switch {
	case errors.As(err, &own):
		return own.Error()
	case errors.Is(err, walq.ErrFailed):
		what = "the queue has failed and serves nothing until it is opened again"
	case errors.Is(err, walq.ErrQueueDeleted):
		return "the queue was deleted"
	case errors.Is(err, walq.ErrClosed):
		return "the queue is closed"
	case errors.Is(err, errBadInput), errors.Is(err, walq.ErrInvalid), errors.Is(err, ErrUnknownQueue),
		errors.Is(err, walq.ErrNoItem), errors.Is(err, walq.ErrNotFound):
		return err.Error()
	}
	ref := newJobID()[:8]
	log := h.opts.Logger
	if log == nil {
		log = slog.Default()
	}
	path := ""
	if r != nil {
		path = r.URL.Path
	}
	log.Error("walq: dashboard request failed", "ref", ref, "path", path, "error", err.Error())
	return fmt.Sprintf("%s (reference %s: the server's log has the error)", what, ref)
}

// shownErr is an error the dashboard makes itself, whose text a page may
// show as it is.
type shownErr struct{ error }

func (e shownErr) Unwrap() error { return e.error }

// status maps an error of a source to an HTTP status.
func status(err error) int {
	switch {
	case errors.Is(err, ErrUnknownQueue), errors.Is(err, walq.ErrNoItem), errors.Is(err, walq.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, walq.ErrInvalid), errors.Is(err, errBadInput):
		return http.StatusBadRequest
	case errors.Is(err, walq.ErrClosed), errors.Is(err, walq.ErrFailed), errors.Is(err, walq.ErrQueueDeleted):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

var errBadInput = errors.New("bad input")

// page is what every template gets.
type page struct {
	Title string
	Base  string
	Nav   string // which part of the dashboard: "overview", a queue's name
	Actor bool   // the source can act at all
	// can says whether the request may take an action of a kind on the
	// page's queue (nil on a page of no queue).
	can func(ActionKind) bool
	// Redacted says bodies are shown through Options.FormatBody: the
	// lists then give no stored length, which would measure what it
	// hides.
	Redacted bool
	Now      time.Time
	Data     any
	// Refresh asks the browser to load the page again every second (a
	// bulk action's progress, which reads without script).
	Refresh bool
}

// refresher is data whose page reloads itself while it changes.
type refresher interface{ refresh() bool }

func (h *Handler) render(w http.ResponseWriter, r *http.Request, name string, data any) {
	h.renderCode(w, r, http.StatusOK, name, data)
}

// renderCode renders the template name with data, answering code.
func (h *Handler) renderCode(w http.ResponseWriter, r *http.Request, code int, name string, data any) {
	p := page{Title: h.opts.Title, Base: base(r), Actor: h.actor != nil, Now: time.Now(), Data: data,
		Redacted: h.opts.FormatBody != nil}
	if queue, err := queueParam(r); err == nil && r.PathValue("queue") != "" {
		p.can = func(k ActionKind) bool { return h.allows(r, Action{Kind: k, Queue: queue}) }
	}
	if rf, ok := data.(refresher); ok {
		p.Refresh = rf.refresh()
	}
	var buf bytes.Buffer
	if err := h.tmpl.ExecuteTemplate(&buf, name, p); err != nil {
		http.Error(w, "page failed: "+h.shown(r, err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

// Can reports whether the page may offer the action named, on its queue.
func (p page) Can(name string) bool {
	return p.Actor && p.can != nil && p.can(ActionKind(name))
}

// OfQueue reports whether the page is one queue's (what it may offer is
// then the queue's).
func (p page) OfQueue() bool { return p.can != nil }

// limiter counts what is open of something bounded.
type limiter struct {
	mu  sync.Mutex
	n   int
	max int
}

// TryAcquire takes one, false when max are taken.
func (l *limiter) TryAcquire() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n >= l.max {
		return false
	}
	l.n++
	return true
}

// Release gives one back.
func (l *limiter) Release() {
	l.mu.Lock()
	l.n--
	l.mu.Unlock()
}

// hostAllowed says whether a request for host (a Host header, with or
// without a port) may be answered: an IP address, localhost (or a name
// under .localhost), or a name of allowed ("*": any).
func hostAllowed(host string, allowed []string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(strings.Trim(host, "[]")) != nil {
		return true
	}
	for _, a := range allowed {
		if a == "*" || strings.EqualFold(strings.TrimSuffix(a, "."), host) {
			return true
		}
	}
	return false
}
