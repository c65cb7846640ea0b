package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/walq/walq"
)

// Attacks on the dashboard, and careless requests: each test holds one
// bound or one escape.

// hugeCounters is a Source whose counters are past 2^63, as a custom
// Source or a damaged directory may give.
type hugeCounters struct{ Source }

func (s hugeCounters) fix(sum QueueSummary) QueueSummary {
	sum.Stats.Put = 1 << 63
	sum.Stats.Acked = 1<<64 - 1
	sum.Stats.Delivered = 1 << 63
	return sum
}

func (s hugeCounters) Queues() ([]QueueSummary, error) {
	qs, err := s.Source.Queues()
	for i := range qs {
		qs[i] = s.fix(qs[i])
	}
	return qs, err
}

func (s hugeCounters) Queue(name string) (QueueSummary, error) {
	q, err := s.Source.Queue(name)
	return s.fix(q), err
}

// TestCountersPast2To63Render: counters of 2^63 and more render, with
// their digits grouped (before, num recursed on the most negative int64
// until the stack overflowed, a crash no recover catches).
func TestCountersPast2To63Render(t *testing.T) {
	for n, want := range map[uint64]string{1 << 63: "9,223,372,036,854,775,808", 1<<64 - 1: "18,446,744,073,709,551,615", 0: "0", 999: "999", 1000: "1,000"} {
		if got := numAny(n); got != want {
			t.Errorf("num(%d) = %q, want %q", n, got, want)
		}
	}
	if got := num(int64(-1 << 63)); got != "-9,223,372,036,854,775,808" {
		t.Errorf("num(MinInt64) = %q", got)
	}
	f := newFixture(t, nil)
	h, err := New(hugeCounters{mustSource(t, f)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, path := range []string{"/", "/q/mail/"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, newRequest(http.MethodGet, path))
		if rec.Code != http.StatusOK || path != "/" && !strings.Contains(rec.Body.String(), "9,223,372,036,854,775,808") {
			t.Fatalf("%s: %d, the counter of 2^63 not shown", path, rec.Code)
		}
	}
}

func mustSource(t *testing.T, f *fixture) Source {
	t.Helper()
	src, err := Queues(f.q, f.named)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// TestRedirectsKeepTheMountPrefix: a queue's page asked for without its
// trailing slash redirects under the prefix the dashboard is mounted at
// (before, to /q/mail/, outside it), and so do the actions' redirects.
func TestRedirectsKeepTheMountPrefix(t *testing.T) {
	f := newFixture(t, fullAccess)
	code, hdr, _ := f.get("/q/mail")
	if code/100 != 3 || hdr.Get("Location") != "/ops/queues/q/mail/" {
		t.Fatalf("GET /ops/queues/q/mail: %d to %q, want a redirect to /ops/queues/q/mail/", code, hdr.Get("Location"))
	}
	f.put(f.named, "x")
	ids := f.kill(f.named, 1, "boom")
	resp := f.postResp("/q/mail/redrive", url.Values{"id": {strconv.FormatUint(ids[0], 10)}})
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ops/queues/q/mail/") {
		t.Fatalf("redrive: %d to %q, want under /ops/queues/q/mail/", resp.StatusCode, loc)
	}
}

var valueAttr = regexp.MustCompile(`value="[^"]*"`)

// TestBidiControlsShownAsEscapes: a key, a last error and a history
// error holding bidirectional controls (or a BOM, or other control
// characters) reach no page as such: each shows as an escape, as in
// bodies (before, "invoice-\u202egnp.exe" showed as "invoice-exe.png").
func TestBidiControlsShownAsEscapes(t *testing.T) {
	f := newFixture(t, nil)
	key := "invoice-\u202egnp.exe"
	id, err := f.named.Put(context.Background(), []byte("body"), walq.WithKey(key))
	if err != nil {
		t.Fatal(err)
	}
	m, ok, err := f.named.TryGet()
	if err != nil || !ok || m.ID != id {
		t.Fatalf("TryGet: %v %v", ok, err)
	}
	if err := f.named.Nack(m.Receipt, errors.New("failed \u2067quietly\u2069 \ufeff\x1b[2J")); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/q/mail/?state=dead", "/q/mail/item/" + strconv.FormatUint(id, 10), "/q/mail/?state=dead&key=" + url.QueryEscape(key)} {
		code, _, body := f.get(path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", path, code)
		}
		// A search form gives back what was typed in its fields, as typed
		// (its hidden fields must carry it exactly); no text node shows it.
		body = valueAttr.ReplaceAllString(body, `value=""`)
		for _, r := range []string{"\u202e", "\u2067", "\u2069", "\ufeff", "\x1b"} {
			if strings.Contains(body, r) {
				t.Errorf("%s: the page holds %U as such", path, []rune(r)[0])
			}
		}
		if !strings.Contains(body, `\u202e`) {
			t.Errorf("%s: the key's U+202E is not shown as an escape", path)
		}
	}
}

// TestEventStreamsBounded: a stream naming queues the source does not
// have is refused before anything is watched (before, each unknown name
// started a broadcaster, up to 1,000 a request, with a goroutine per name
// and stream), a name given many times is watched once, and streams past
// Options.MaxEventStreams are refused with 503.
func TestEventStreamsBounded(t *testing.T) {
	f := newFixture(t, nil)
	var q strings.Builder
	for i := range 999 {
		fmt.Fprintf(&q, "&queue=nope-%d", i)
	}
	code, _, _ := f.get("/events?queue=mail" + q.String())
	if code != http.StatusNotFound {
		t.Fatalf("a stream of 999 unknown queues: %d, want 404", code)
	}
	if n := f.h.hub.broadcasters(); n != 0 {
		t.Fatalf("%d broadcasters after a refused stream", n)
	}
	f.h.opts.MaxEventStreams = 2
	f.h.streams.max = 2
	a := openStream(t, f, "?queue=mail"+strings.Repeat("&queue=mail", 500))
	b := openStream(t, f, "?queue=_default&queue=mail")
	a.next(t, "row-mail", "")
	b.next(t, "row-mail", "")
	f.h.hub.mu.Lock()
	subs := len(f.h.hub.byName["mail"].subs)
	f.h.hub.mu.Unlock()
	if n := f.h.hub.broadcasters(); n != 2 || subs != 2 {
		t.Fatalf("%d broadcasters, %d subscribers of mail; want 2 and 2", n, subs)
	}
	code, hdr, _ := f.get("/events?queue=mail")
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("a third stream past MaxEventStreams 2: %d", code)
	}
	a.resp.Body.Close()
	b.resp.Body.Close()
}

// TestBulkJobsBounded: however many bulk actions are prepared, the
// dashboard keeps at most maxJobs, at most maxHolding of them holding
// their matched IDs, even while the oldest runs (before, a running oldest
// job stopped the cap: 300 prepares kept 300 jobs and their IDs); a
// finished job drops its IDs; and with maxHolding running, a prepare is
// refused with 503.
func TestBulkJobsBounded(t *testing.T) {
	js := newJobs()
	running := &job{ID: "running", State: "running", ids: []uint64{1}}
	if err := js.add(running); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		st := "confirm"
		if i%2 == 0 {
			st = "done"
		}
		if err := js.add(&job{ID: fmt.Sprint(i), State: st, ids: []uint64{1, 2, 3}}); err != nil {
			t.Fatal(err)
		}
	}
	if kept, holding := js.count(); kept > maxJobs || holding > maxHolding || js.get("running") == nil {
		t.Fatalf("after 300 prepares beside a running job: %d kept, %d holding IDs (at most %d and %d), running kept: %v",
			kept, holding, maxJobs, maxHolding, js.get("running") != nil)
	}
	for i := range maxHolding - 1 {
		if err := js.add(&job{ID: fmt.Sprint("r", i), State: "running"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := js.add(&job{ID: "one more", State: "confirm"}); !errors.Is(err, errTooManyJobs) {
		t.Fatalf("a prepare beside %d running jobs: %v", maxHolding, err)
	}

	f := newFixture(t, fullAccess)
	f.put(f.named, "a")
	f.kill(f.named, 1, "boom")
	id := f.prepare("/q/mail/bulk", url.Values{"action": {"purge"}, "state": {"dead"}})
	if code, _ := f.post("/q/mail/jobs/"+id+"/run", nil); code != http.StatusSeeOther {
		t.Fatalf("run: %d", code)
	}
	j := f.h.jobs.get(id)
	<-j.finished
	j.mu.Lock()
	n := len(j.ids)
	j.mu.Unlock()
	if n != 0 {
		t.Fatalf("a finished job holds %d IDs", n)
	}
}

// TestRedactedFieldLearnedNowhere: with a redacting FormatBody, a reader
// learns nothing of the redacted field: a search in bodies for any part
// of it lists nothing in any state, a bulk action counts nothing, and no
// list shows a body's stored length (before, ?q=guess&body=1 matched the
// stored bytes: a card number in 77 searches).
func TestRedactedFieldLearnedNowhere(t *testing.T) {
	f := newFixture(t, fullAccess)
	card := regexp.MustCompile(`[0-9]{12,19}`)
	f.h.opts.FormatBody = func(_ string, _ walq.ItemView, b []byte) []byte { return card.ReplaceAll(b, []byte("[card]")) }
	secret := "4111111111111111"
	body := "charge " + secret + " for order 7; padding to an odd length...."
	f.put(f.named, body, "no card here")
	f.put(f.named, body)
	f.kill(f.named, 1, "declined") // the first: dead; the second waits ready
	guesses := []string{secret, "4111", "41111111", "1111111111111111"}
	for i := 1; i <= len(secret); i++ {
		guesses = append(guesses, secret[:i]+" for")
	}
	for _, g := range guesses {
		for _, state := range []string{"ready", "dead", ""} {
			v := url.Values{"state": {state}, "q": {g}, "body": {"1"}}
			code, _, page := f.get("/q/mail/?" + v.Encode())
			if code != http.StatusOK || !strings.Contains(page, "No item here.") {
				t.Fatalf("a search for %q in %q bodies lists an item (%d)", g, state, code)
			}
		}
		id := f.prepare("/q/mail/bulk", url.Values{"action": {"purge"}, "state": {"dead"}, "q": {g}, "body": {"1"}})
		if _, _, page := f.get("/q/mail/jobs/" + id); !strings.Contains(page, "Nothing matches") {
			t.Fatalf("a bulk purge of dead letters whose body holds %q counts some", g)
		}
	}
	// What it shows can be searched.
	if _, _, page := f.get("/q/mail/?state=dead&q=%5Bcard%5D&body=1"); strings.Contains(page, "No item here.") {
		t.Fatal("a search for what the redactor shows finds nothing")
	}
	for _, path := range []string{"/q/mail/?state=ready", "/q/mail/?state=dead", "/q/mail/head"} {
		if _, _, page := f.get(path); strings.Contains(page, fmt.Sprintf("%d B", len(body))) {
			t.Fatalf("%s shows the stored length %d B", path, len(body))
		}
	}
}

// TestHostNamesAllowed: a request for a host name the dashboard was not
// given is refused (DNS rebinding: before, any Host was answered); IP
// addresses and localhost always are; Options.Hosts adds names, "*" any.
func TestHostNamesAllowed(t *testing.T) {
	for _, tc := range []struct {
		hosts []string
		host  string
		ok    bool
	}{
		{nil, "127.0.0.1:8080", true},
		{nil, "[::1]:8080", true},
		{nil, "10.1.2.3", true},
		{nil, "localhost:8080", true},
		{nil, "admin.localhost", true},
		{nil, "attacker.example:8080", false},
		{nil, "127.0.0.1.nip.io", false},
		{[]string{"queue.example.com"}, "Queue.Example.COM:443", true},
		{[]string{"queue.example.com"}, "other.example.com", false},
		{[]string{"*"}, "anything.example", true},
	} {
		h, err := New(hugeCounters{}, Options{Hosts: tc.hosts})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/static/style.css", nil)
		req.Host = tc.host
		h.ServeHTTP(rec, req)
		h.Close()
		if got := rec.Code != http.StatusMisdirectedRequest; got != tc.ok {
			t.Errorf("Hosts %v, Host %q: %d", tc.hosts, tc.host, rec.Code)
		}
	}
}

// TestBodySearchBoundedInBytes: a search in bodies is bounded by the bytes
// it reads, not only by the number of bodies: a page through a redacting
// FormatBody reads at most ListOptions.BodyBytes of stored bodies and says
// where to go on, and a bulk action whose match would read more than
// MaxBulkBodyBytes is refused, to be narrowed (before, 1,500 bodies of
// 1 MiB were read for one page: 1.4 s, 3 GiB allocated).
func TestBodySearchBoundedInBytes(t *testing.T) {
	f := newFixture(t, fullAccess)
	f.h.opts.FormatBody = func(_ string, _ walq.ItemView, b []byte) []byte { return b }
	big := strings.Repeat("b", 256<<10)
	for range 12 {
		f.put(f.named, big)
	}
	f.kill(f.named, 12, "x")
	p, err := f.h.listItems(newRequest(http.MethodGet, "/"), "mail", walq.ListOptions{Filter: walq.ItemFilter{Text: "needle", InBody: true}, BodyBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if p.Searched != 4 || p.SearchedBytes != 1<<20 || p.Next == 0 {
		t.Fatalf("one page read %d bodies, %d bytes, next %d; want 4 bodies, 1 MiB, and a next page", p.Searched, p.SearchedBytes, p.Next)
	}
	bulkBodyBytes = 2 << 20
	t.Cleanup(func() { bulkBodyBytes = MaxBulkBodyBytes })
	resp := f.postResp("/q/mail/bulk", url.Values{"action": {"purge"}, "state": {"dead"}, "q": {"needle"}, "body": {"1"}})
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusSeeOther || !strings.Contains(string(b), "narrow it") {
		t.Fatalf("a bulk purge reading 3 MiB of bodies past a bound of 2 MiB: %d\n%s", resp.StatusCode, b)
	}
	if st := f.named.StatsNow(); st.Dead != 12 {
		t.Fatalf("the refused bulk action changed the queue: %+v", st)
	}
}

// failingSource is a live source whose reads fail with an error naming a
// server path, as an unreadable segment's would.
type failingSource struct {
	Source
	err error
}

func (s failingSource) ItemBody(string, uint64) ([]byte, error) { return nil, s.err }

func (s failingSource) ListItems(string, walq.ListOptions) (walq.ItemPage, error) {
	return walq.ItemPage{}, s.err
}

// TestErrorPagesShowNoServerPaths: a failure of the source reaches a page
// as what kind of failure it was and a reference to the log line that
// holds the error, never its text (before, the item page and the error
// page showed the error as it came, server paths included); a refusal of
// the request still says why.
func TestErrorPagesShowNoServerPaths(t *testing.T) {
	q, err := walq.Open(t.TempDir(), walq.Options{Sync: walq.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	id, err := q.Put(context.Background(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := Queues(q)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "/srv/private/walq/000000000007.seg"
	logs := &logBuffer{}
	h, err := New(failingSource{src, fmt.Errorf("read %s: input/output error", secret)},
		Options{Access: fullAccess, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	for _, path := range []string{fmt.Sprintf("/q/_default/item/%d", id), "/q/_default/?state=ready", fmt.Sprintf("/q/_default/item/%d/raw", id)} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, newRequest(http.MethodGet, path))
		page := rec.Body.String()
		if strings.Contains(page, "/srv/private") || strings.Contains(page, "input/output") {
			t.Errorf("GET %s (%d) shows the source's error:\n%s", path, rec.Code, page)
		}
		_, ref, ok := strings.Cut(page, "reference ")
		if !ok || len(ref) < 8 {
			t.Errorf("GET %s (%d) gives no reference to the log:\n%s", path, rec.Code, page)
			continue
		}
		if !strings.Contains(logs.String(), "ref="+ref[:8]) || !strings.Contains(logs.String(), secret) {
			t.Errorf("GET %s: the log has no line with reference %s and the error:\n%s", path, ref[:8], logs)
		}
	}
	// A refusal of the request says why.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, newRequest(http.MethodGet, "/q/_default/?state=nonsense"))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "nonsense") {
		t.Fatalf("a bad filter: %d\n%s", rec.Code, rec.Body)
	}
}

// TestFailureWrappingARequestErrorShowsItsKind: an error that is both a
// failure of the queue and one the request could be told (ErrFailed
// wrapping ErrNotFound) shows only its kind and a reference.
func TestFailureWrappingARequestErrorShowsItsKind(t *testing.T) {
	h := &Handler{opts: Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	err := fmt.Errorf("%w: read /srv/private/x.seg: %w", walq.ErrFailed, walq.ErrNotFound)
	if got := h.shown(newRequest(http.MethodGet, "/"), err); strings.Contains(got, "/srv/private") || !strings.Contains(got, "reference ") {
		t.Fatalf("shown %q", got)
	}
}
