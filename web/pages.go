package web

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/walq/walq"
)

// row is one queue as the overview and the queue page show it.
type row struct {
	QueueSummary
	Path  string // the queue's path segment
	Label string // its name for people
	Chart chart
}

// rows are the overview's rows: the queues r may read.
func (h *Handler) rows(r *http.Request, now time.Time) ([]row, error) {
	sums, err := h.src.Queues()
	if err != nil {
		return nil, err
	}
	out := make([]row, 0, len(sums))
	for _, s := range sums {
		if h.allows(r, Action{Kind: Read, Queue: s.Name}) {
			out = append(out, h.row(s, now))
		}
	}
	return out, nil
}

func (h *Handler) row(s QueueSummary, now time.Time) row {
	h.rates.observe(s, now)
	ms := h.rates.minutes(s.Name, now)
	if hist, ok := h.src.(Historian); ok {
		if logged, upTo, err := hist.History(s.Name, now.Add(-chartSpan)); err == nil && !upTo.IsZero() {
			ms = withLogged(ms, logged, upTo)
		}
	}
	return row{QueueSummary: s, Path: queuePath(s.Name), Label: queueLabel(s.Name), Chart: newChart(ms)}
}

// withLogged takes the chart's minutes that start before upTo from the
// log, and keeps the sampled ones after it. (The minute upTo falls in is
// the log's: over a directory the log is complete to the last refresh;
// for live queues the samples of the rest of that minute are left out.)
func withLogged(sampled, logged []Minute, upTo time.Time) []Minute {
	byStart := make(map[int64]Minute, len(logged))
	for _, m := range logged {
		byStart[m.Start.UnixNano()] = m
	}
	out := make([]Minute, len(sampled))
	for i, m := range sampled {
		if m.Start.Before(upTo) {
			l := byStart[m.Start.UnixNano()]
			m.Put, m.Acked, m.Failed = l.Put, l.Acked, l.Failed
		}
		out[i] = m
	}
	return out
}

// queueLabel is a queue's name for people, wherever a page shows it (text,
// titles, labels): the characters segments escapes show as their escapes,
// in plain text, so a name from a custom Source cannot read as another.
func queueLabel(name string) string {
	if name == "" {
		return "(default queue)"
	}
	var b strings.Builder
	for _, sg := range segments([]byte(name)) {
		b.WriteString(sg.Text)
	}
	return b.String()
}

// summary finds one queue's row.
func (h *Handler) summary(name string, now time.Time) (row, error) {
	s, err := h.src.Queue(name)
	if err != nil {
		return row{}, err
	}
	return h.row(s, now), nil
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	rows, err := h.rows(r, time.Now())
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	h.render(w, r, "overview", map[string]any{"Rows": rows})
}

// filterForm is a filter as its form holds it, to fill the form again and
// build the links of the next pages.
type filterForm struct {
	State, ID, Key, From, To, Text string
	InBody                         bool
}

// timeLayouts are the forms a time may take in a filter: RFC 3339, or
// what a datetime-local field sends (read as UTC).
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: %s %q: give a time as 2006-01-02T15:04:05Z (UTC unless it says otherwise)", errBadInput, field, s)
}

// parseFilter reads a filter from a query or a form.
func parseFilter(v url.Values) (walq.ItemFilter, filterForm, error) {
	ff := filterForm{
		State: v.Get("state"), ID: strings.TrimSpace(v.Get("id")), Key: v.Get("key"),
		From: strings.TrimSpace(v.Get("from")), To: strings.TrimSpace(v.Get("to")), Text: v.Get("q"), InBody: v.Get("body") == "1",
	}
	f := walq.ItemFilter{State: ff.State, Key: ff.Key, Text: ff.Text, InBody: ff.InBody}
	switch ff.State {
	case "", "ready", "delayed", "leased", "dead":
	default:
		return f, ff, fmt.Errorf("%w: state %q: want ready, delayed, leased or dead", errBadInput, ff.State)
	}
	if ff.ID != "" {
		id, err := strconv.ParseUint(ff.ID, 10, 64)
		if err != nil || id == 0 {
			return f, ff, fmt.Errorf("%w: item ID %q: want a positive whole number", errBadInput, ff.ID)
		}
		f.ID = id
	}
	var err error
	if f.From, err = parseTime("from", ff.From); err != nil {
		return f, ff, err
	}
	if f.To, err = parseTime("to", ff.To); err != nil {
		return f, ff, err
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		return f, ff, fmt.Errorf("%w: from %s is not before to %s", errBadInput, ff.From, ff.To)
	}
	if len(ff.Text) > 1024 {
		return f, ff, fmt.Errorf("%w: a search of %d bytes, at most 1024", errBadInput, len(ff.Text))
	}
	return f, ff, nil
}

// values is the filter as query parameters.
func (ff filterForm) values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("state", ff.State)
	set("id", ff.ID)
	set("key", ff.Key)
	set("from", ff.From)
	set("to", ff.To)
	set("q", ff.Text)
	if ff.InBody {
		v.Set("body", "1")
	}
	return v
}

// Describe says what the filter selects, for a confirmation.
func (ff filterForm) Describe() string {
	var parts []string
	add := func(k, s string) {
		if s != "" {
			parts = append(parts, fmt.Sprintf("%s %s", k, quoteShown(s)))
		}
	}
	add("state", ff.State)
	add("ID", ff.ID)
	add("key", ff.Key)
	add("put from", ff.From)
	add("put before", ff.To)
	if ff.Text != "" {
		where := "errors"
		if ff.InBody {
			where = "errors or body"
		}
		parts = append(parts, fmt.Sprintf("%s containing %s", where, quoteShown(ff.Text)))
	}
	if len(parts) == 0 {
		return "every item"
	}
	return strings.Join(parts, ", ")
}

// Empty reports whether the filter selects by nothing but its state.
func (ff filterForm) Empty() bool {
	return ff.ID == "" && ff.Key == "" && ff.From == "" && ff.To == "" && ff.Text == ""
}

// listing is the data of a queue page.
type listing struct {
	Row      row
	Form     filterForm
	Page     walq.ItemPage
	After    uint64
	Next     template.URL // the query of the next page ("?..."), "" at the end
	First    template.URL // the query of the first page
	Budget   int
	Error    string
	Bulkable bool // the filter selects dead letters: bulk actions apply
}

func (h *Handler) queuePage(w http.ResponseWriter, r *http.Request, name string) {
	rw, err := h.summary(name, time.Now())
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	q := r.URL.Query()
	if q.Get("state") == "" && !q.Has("state") {
		q.Set("state", "ready")
	}
	f, ff, err := parseFilter(q)
	data := listing{Row: rw, Form: ff}
	if err != nil {
		data.Error = h.shown(r, err)
		h.renderCode(w, r, http.StatusBadRequest, "queue", data)
		return
	}
	if a := q.Get("after"); a != "" {
		if data.After, err = strconv.ParseUint(a, 10, 64); err != nil {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%w: after %q: want an item ID", errBadInput, a))
			return
		}
	}
	data.Page, err = h.listItems(r, name, walq.ListOptions{Filter: f, After: data.After})
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	if data.Page.Next != 0 {
		v := ff.values()
		v.Set("after", strconv.FormatUint(data.Page.Next, 10))
		data.Next = query(v)
	}
	data.First = query(ff.values())
	data.Bulkable = ff.State == "dead"
	h.render(w, r, "queue", data)
}

// query makes a relative link of query parameters. The encoding escapes
// every value, so the link is safe to use as it stands.
func query(v url.Values) template.URL { return template.URL("?" + v.Encode()) }

func (h *Handler) headPage(w http.ResponseWriter, r *http.Request, name string) {
	var err error
	n := 100
	if s := r.URL.Query().Get("n"); s != "" {
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > walq.MaxHead {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%w: n %q: want 1 to %d", errBadInput, s, walq.MaxHead))
			return
		}
	}
	rw, err := h.summary(name, time.Now())
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	ask := n
	if h.opts.Allow != nil {
		ask = walq.MaxHead // room for the items Allow refuses
	}
	items, err := h.src.Head(name, ask)
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	if h.opts.Allow != nil {
		// An item whose Read Allow refuses is not shown, as in the lists:
		// the head shows the first n readable ones of the first MaxHead.
		items = slices.DeleteFunc(items, func(it walq.ItemView) bool {
			return !h.allows(r, Action{Kind: Read, Queue: name, Items: []uint64{it.ID}})
		})
		items = items[:min(len(items), n)]
	}
	h.render(w, r, "head", map[string]any{"Row": rw, "Items": items, "N": n, "Max": walq.MaxHead})
}

// itemData is the data of an item page.
type itemData struct {
	Row       row
	Item      walq.ItemView
	Body      []segment
	Shown     int // bytes of the (formatted) body shown
	Len       int // bytes of the (formatted) body
	BodyError string
}

// body returns the item's body as the dashboard serves it: through
// Options.FormatBody when set.
func (h *Handler) body(queue string, it walq.ItemView) ([]byte, error) {
	b, err := h.src.ItemBody(queue, it.ID)
	if err != nil {
		return nil, err
	}
	if h.opts.FormatBody != nil {
		b = h.opts.FormatBody(queue, it, b)
	}
	return b, nil
}

// itemOf returns the item the request's path names in queue name, or
// fails the request and returns ok false.
func (h *Handler) itemOf(w http.ResponseWriter, r *http.Request, name string) (it walq.ItemView, ok bool) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		err = fmt.Errorf("%w: item ID %q: want a positive whole number", errBadInput, r.PathValue("id"))
	} else {
		it, err = h.src.Item(name, id)
	}
	if err != nil {
		h.fail(w, r, status(err), err)
		return walq.ItemView{}, false
	}
	return it, true
}

func (h *Handler) itemPage(w http.ResponseWriter, r *http.Request, name string) {
	it, ok := h.itemOf(w, r, name)
	if !ok {
		return
	}
	rw, err := h.summary(name, time.Now())
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	data := itemData{Row: rw, Item: it}
	b, err := h.body(name, it)
	if err != nil && !errors.Is(err, walq.ErrNoItem) {
		data.BodyError = h.shown(r, err)
	}
	data.Len = len(b)
	data.Shown = min(len(b), h.opts.BodyCut)
	data.Body = segments(b[:data.Shown])
	h.render(w, r, "item", data)
}

// rawBody serves a body as a download that no browser renders: an opaque
// type, an attachment, no sniffing, and a sandbox should it be opened.
func (h *Handler) rawBody(w http.ResponseWriter, r *http.Request, name string) {
	it, ok := h.itemOf(w, r, name)
	if !ok {
		return
	}
	b, err := h.body(name, it)
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/octet-stream")
	hdr.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-item-%d.bin"`, queuePath(name), it.ID))
	hdr.Set("Content-Security-Policy", rawCSP)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

// quoteShown quotes s for a page as the escaping path shows it: what
// segments escapes, escaped, and a quote or backslash of s escaped.
func quoteShown(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, sg := range segments([]byte(s)) {
		if sg.Escape {
			b.WriteString(sg.Text)
			continue
		}
		for _, r := range sg.Text {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
