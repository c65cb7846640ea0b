package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/walq/walq"
)

func TestPagesRender(t *testing.T) {
	f := newFixture(t, fullAccess)
	f.put(f.q, "a", "b")
	f.put(f.named, "m1", "m2", "m3")
	dead := f.kill(f.named, 1, "smtp: refused")
	tests := []struct {
		path string
		want []string
	}{
		{"/", []string{`id="row-_default"`, `id="row-mail"`, `href="q/mail/"`, `data-count="dead"><a href="q/mail/?state=dead">1</a>`}},
		{"/q/mail/", []string{"Queue mail", `aria-current="page">Ready`, `href="/ops/queues/q/mail/item/4"`}},
		{"/q/mail/?state=dead", []string{fmt.Sprintf(`id="item-%d"`, dead[0]), "smtp: refused", "Redrive all matching"}},
		{"/q/_default/head", []string{"The next 2 deliveries", `href="/ops/queues/q/_default/item/1"`}},
		{fmt.Sprintf("/q/mail/item/%d", dead[0]), []string{"smtp: refused", "Download the raw body", "<h2>History</h2>"}},
	}
	for _, tc := range tests {
		code, hdr, body := f.get(tc.path)
		if code != http.StatusOK {
			t.Errorf("%s: %d\n%s", tc.path, code, body)
			continue
		}
		if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: CSP %q", tc.path, csp)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: no %q in\n%s", tc.path, w, body)
			}
		}
	}
	for path, want := range map[string]int{
		"/q/nope/":              http.StatusNotFound,
		"/q/mail/item/999":      http.StatusNotFound,
		"/q/mail/item/x":        http.StatusBadRequest,
		"/q/mail/?state=acked":  http.StatusBadRequest,
		"/q/mail/?id=-1":        http.StatusBadRequest,
		"/q/mail/?from=someday": http.StatusBadRequest,
		"/q/mail/head?n=5000":   http.StatusBadRequest,
		"/q/mail/jobs/nope":     http.StatusNotFound,
	} {
		if code, _, body := f.get(path); code != want {
			t.Errorf("%s: %d, want %d\n%s", path, code, want, body)
		}
	}
}

func TestListPagesFollowTheCursor(t *testing.T) {
	f := newFixture(t, ReadOnlyAccess)
	for i := range 120 {
		f.put(f.q, fmt.Sprint("body ", i))
	}
	next := regexp.MustCompile(`href="\?([^"]*after=[0-9]+[^"]*)" rel="next"`)
	path := "/q/_default/?state=ready"
	var seen []string
	for range 10 {
		code, _, body := f.get(path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", path, code)
		}
		seen = append(seen, regexp.MustCompile(`id="item-([0-9]+)"`).FindAllString(body, -1)...)
		m := next.FindStringSubmatch(body)
		if m == nil {
			if !strings.Contains(body, "that is all") {
				t.Fatalf("last page does not say it is the last:\n%s", body)
			}
			break
		}
		path = "/q/_default/?" + strings.ReplaceAll(m[1], "&amp;", "&")
	}
	if len(seen) != 120 || seen[0] != `id="item-1"` || seen[119] != `id="item-120"` {
		t.Fatalf("saw %d items, from %v to %v", len(seen), seen[0], seen[len(seen)-1])
	}
}

func TestSearchSaysHowMuchItCovered(t *testing.T) {
	f := newFixture(t, ReadOnlyAccess)
	for range 20 {
		f.put(f.q, "plain")
	}
	f.put(f.q, "has a needle")
	_, _, body := f.get("/q/_default/?state=ready&q=needle&body=1")
	if !strings.Contains(body, "Looked at 21 of 21 stored items, searched 21 bodies; that is all.") || !strings.Contains(body, `id="item-21"`) {
		t.Fatalf("search page:\n%s", body)
	}
}

func TestBodyIsTextAndItsDownloadIsNoPage(t *testing.T) {
	f := newFixture(t, ReadOnlyAccess)
	body := "<script>alert(1)</script>\xff\xfe\u202e end"
	id := f.put(f.q, body)[0]
	_, _, page := f.get(fmt.Sprintf("/q/_default/item/%d", id))
	if strings.Contains(page, "<script>alert") {
		t.Fatalf("the body's script is in the page:\n%s", page)
	}
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", `<span class="esc">\xff</span>`, `<span class="esc">\xfe</span>`, `<span class="esc">\u202e</span>`} {
		if !strings.Contains(page, want) {
			t.Errorf("no %q in the item page", want)
		}
	}
	code, hdr, raw := f.get(fmt.Sprintf("/q/_default/item/%d/raw", id))
	if code != http.StatusOK || raw != body {
		t.Fatalf("raw: %d %q", code, raw)
	}
	for k, want := range map[string]string{
		"Content-Type":            "application/octet-stream",
		"Content-Disposition":     fmt.Sprintf(`attachment; filename="_default-item-%d.bin"`, id),
		"X-Content-Type-Options":  "nosniff",
		"Content-Security-Policy": "sandbox; default-src 'none'",
	} {
		if got := hdr.Get(k); got != want {
			t.Errorf("raw %s: %q, want %q", k, got, want)
		}
	}
}

func TestBodyCutAndFormatted(t *testing.T) {
	q, err := walq.Open(t.TempDir(), walq.Options{Sync: walq.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	id, _ := q.Put(context.Background(), []byte(`{"user":"ann","card":"4111111111111111"}`+strings.Repeat(" ", 100)))
	src, _ := Queues(q)
	h, err := New(src, Options{BodyCut: 30, FormatBody: func(_ string, _ walq.ItemView, b []byte) []byte {
		return regexp.MustCompile(`"card":"[0-9]+"`).ReplaceAll(b, []byte(`"card":"REDACTED"`))
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rec := httptestGet(t, h, fmt.Sprintf("/q/_default/item/%d", id))
	if !strings.Contains(rec, "The first 30 of 132 bytes") || strings.Contains(rec, "4111") {
		t.Fatalf("item page:\n%s", rec)
	}
	if raw := httptestGet(t, h, fmt.Sprintf("/q/_default/item/%d/raw", id)); strings.Contains(raw, "4111") || !strings.Contains(raw, "REDACTED") {
		t.Fatalf("raw download %q", raw)
	}
}

// actionForms are a request for every action, on items that allow it.
func actionForms(f *fixture, dead uint64) map[string]url.Values {
	id := url.Values{"id": {fmt.Sprint(dead)}}
	return map[string]url.Values{
		"/q/mail/redrive":  id,
		"/q/mail/purge":    id,
		"/q/mail/delete":   id,
		"/q/mail/pause":    {"for": {"1h"}},
		"/q/mail/resume":   {},
		"/q/mail/bulk":     {"action": {"purge"}, "state": {"dead"}},
		"/q/mail/bulk?x=1": {"action": {"redrive"}, "state": {"dead"}},
	}
}

func TestReadOnlyRefusesEveryAction(t *testing.T) {
	for name, access := range map[string]func(*http.Request) Access{
		"read-only":           ReadOnlyAccess,
		"purge without bulk":  func(*http.Request) Access { return ReadOnly | AccessPurge },
		"nothing but reading": func(*http.Request) Access { return AccessRead },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, access)
			f.put(f.named, "a", "b")
			dead := f.kill(f.named, 1, "x")[0]
			for path, form := range actionForms(f, dead) {
				if name == "purge without bulk" && path == "/q/mail/purge" {
					continue // this one it may do
				}
				code, body := f.post(path, form)
				if code != http.StatusForbidden {
					t.Errorf("POST %s: %d, want 403\n%s", path, code, body)
				}
			}
			if st := f.named.StatsNow(); st.Dead != 1 || st.Paused || st.Ready != 1 {
				t.Fatalf("after refused actions: %+v", st)
			}
			_, _, page := f.get("/q/mail/?state=dead")
			if name == "read-only" && (strings.Contains(page, "<button") && strings.Contains(page, "Redrive")) {
				t.Errorf("a read-only page offers actions:\n%s", page)
			}
		})
	}
}

func TestNoAccessRefusesPages(t *testing.T) {
	f := newFixture(t, func(*http.Request) Access { return NoAccess })
	for _, p := range []string{"/", "/q/mail/", "/events", "/static/style.css"} {
		if code, _, _ := f.get(p); code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", p, code)
		}
	}
}

func TestCrossOriginActionRefused(t *testing.T) {
	f := newFixture(t, fullAccess)
	f.put(f.named, "a")
	dead := f.kill(f.named, 1, "x")[0]
	req, _ := http.NewRequest(http.MethodPost, f.url("/q/mail/purge"), strings.NewReader("id="+fmt.Sprint(dead)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site purge: %d, want 403", resp.StatusCode)
	}
	if !deadIDs(f.named)[dead] {
		t.Fatalf("the cross-site purge removed item %d", dead)
	}
}

func TestActionsAreLogged(t *testing.T) {
	f := newFixture(t, fullAccess)
	f.put(f.named, "a", "b")
	dead := f.kill(f.named, 2, "x")
	if code, body := f.post("/q/mail/redrive", url.Values{"id": {fmt.Sprint(dead[0])}, "back": {"item"}}); code != http.StatusSeeOther {
		t.Fatalf("redrive: %d\n%s", code, body)
	}
	if st := f.named.StatsNow(); st.Dead != 1 || st.Redriven != 1 {
		t.Fatalf("after redrive: %+v", st)
	}
	if code, _ := f.post("/q/mail/pause", url.Values{"for": {"1h"}}); code != http.StatusSeeOther {
		t.Fatalf("pause: %d", code)
	}
	if st := f.named.StatsNow(); !st.Paused {
		t.Fatal("not paused")
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Minute).Add(30 * time.Second)
	if code, _ := f.post("/q/mail/pause", url.Values{"until": {until.Format(time.RFC3339)}}); code != http.StatusSeeOther {
		t.Fatalf("pause until: %d", code)
	}
	// Translated to queue time and back: the same to well under a second.
	if _, _, page := f.get("/q/mail/"); !strings.Contains(page, "paused until "+until.Format("2006-01-02 15:04")) {
		t.Fatalf("the page does not show the pause until %s", when(until))
	}
	for _, bad := range []url.Values{{"for": {"-5m"}}, {"for": {"soon"}}, {"until": {"tomorrow"}}, {"until": {"2001-01-01T00:00:00Z"}}} {
		if code, _ := f.post("/q/mail/pause", bad); code != http.StatusBadRequest {
			t.Errorf("pause %v: %d, want 400", bad, code)
		}
	}
	if code, _ := f.post("/q/mail/resume", nil); code != http.StatusSeeOther {
		t.Fatalf("resume: %d", code)
	}
	if f.named.StatsNow().Paused {
		t.Fatal("still paused after resume")
	}
	if code, _ := f.post("/q/mail/purge", url.Values{"id": {fmt.Sprint(dead[0])}}); code != http.StatusNotFound {
		t.Fatalf("purge of a redriven item: %d, want 404", code)
	}
	logs := f.log.String()
	for _, want := range []string{
		`msg="walq: dashboard action" action=redrive queue=mail`,
		`msg="walq: dashboard action" action=pause queue=mail`,
		`msg="walq: dashboard action" action=resume queue=mail`,
		`msg="walq: dashboard action failed" action=purge queue=mail`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("no %q in the log:\n%s", want, logs)
		}
	}
}

func TestBulkPurgeTouchesOnlyWhatMatchedAtT(t *testing.T) {
	f := newFixture(t, fullAccess)
	f.put(f.named, "a1", "a2", "a3", "a4", "a5", "b1", "b2")
	for range 5 {
		f.kill(f.named, 1, "smtp: 550")
	}
	others := f.kill(f.named, 2, "dns: timeout")
	filter := url.Values{"action": {"purge"}, "state": {"dead"}, "q": {"smtp"}}
	job := f.prepare("/q/mail/bulk", filter)
	code, _, page := f.get("/q/mail/jobs/" + job)
	if code != http.StatusOK || !strings.Contains(page, `<strong data-count="matched">5</strong>`) || !strings.Contains(page, "/q/mail/jobs/"+job+"/run") {
		t.Fatalf("the job's page before it runs: %d\n%s", code, page)
	}

	// After T: a new match, and one of the matched redriven.
	late := f.put(f.named, "late")
	f.kill(f.named, 1, "smtp: 550")
	if err := f.named.Redrive(1); err != nil {
		t.Fatal(err)
	}
	if code, _ := f.post("/q/mail/jobs/"+job+"/run", nil); code != http.StatusSeeOther {
		t.Fatalf("run: %d", code)
	}
	waitJob(t, f, job)
	dead := deadIDs(f.named)
	want := map[uint64]bool{others[0]: true, others[1]: true, late[0]: true}
	if len(dead) != len(want) {
		t.Fatalf("dead after the purge: %v, want %v", dead, want)
	}
	for id := range want {
		if !dead[id] {
			t.Fatalf("dead after the purge: %v, want %v", dead, want)
		}
	}
	_, _, jp := f.get("/q/mail/jobs/" + job)
	if !strings.Contains(jp, "4 done, 1 skipped") || strings.Contains(jp, `http-equiv="refresh"`) {
		t.Fatalf("job page:\n%s", jp)
	}
	if code, _ := f.post("/q/mail/jobs/"+job+"/run", nil); code != http.StatusConflict {
		t.Fatalf("second run: %d, want 409", code)
	}
}

func TestBulkRefusesWhatIsNotDead(t *testing.T) {
	f := newFixture(t, fullAccess)
	f.put(f.named, "a")
	if code, _ := f.post("/q/mail/bulk", url.Values{"action": {"purge"}, "state": {"ready"}}); code != http.StatusBadRequest {
		t.Fatalf("bulk purge of ready items: %d, want 400", code)
	}
	if f.named.StatsNow().Ready != 1 {
		t.Fatal("changed")
	}
}

func waitJob(t *testing.T, f *fixture, id string) {
	t.Helper()
	j := f.h.jobs.get(id)
	<-j.finished
	if p := j.progress(); p.State != "done" {
		t.Fatalf("job %s: %+v", id, p)
	}
}

// stream reads an event stream's patches.
type stream struct {
	resp    *http.Response
	patches chan []patch
}

func openStream(t *testing.T, f *fixture, query string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url("/events"+query), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events: %s", ct)
	}
	s := &stream{resp: resp, patches: make(chan []patch, 100)}
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var p []patch
				if json.Unmarshal([]byte(d), &p) == nil {
					s.patches <- p
				}
			}
		}
		close(s.patches)
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
	})
	return s
}

// next waits for a patch of element id whose HTML holds want.
func (s *stream) next(t *testing.T, id, want string) {
	t.Helper()
	for ps := range s.patches {
		for _, p := range ps {
			if p.ID == id && strings.Contains(p.HTML, want) {
				return
			}
		}
	}
	t.Fatalf("the stream ended without a patch of %s holding %q", id, want)
}

func TestLiveUpdatesShareOneBroadcaster(t *testing.T) {
	f := newFixture(t, fullAccess)
	f.h.opts.LiveInterval = time.Hour // reads only when poked
	streams := []*stream{openStream(t, f, "?queue=mail"), openStream(t, f, "?queue=mail"), openStream(t, f, "")}
	for _, s := range streams {
		s.next(t, "row-mail", `data-count="ready">0<`)
	}
	f.h.hub.mu.Lock()
	b := f.h.hub.byName["mail"]
	readsBefore, subs := b.reads, len(b.subs)
	f.h.hub.mu.Unlock()
	if subs != 3 || readsBefore != 1 {
		t.Fatalf("%d subscribers, %d reads; want 3 subscribers on 1 read", subs, readsBefore)
	}
	f.put(f.named, "x")
	f.h.hub.poke("mail")
	for _, s := range streams {
		s.next(t, "counts-mail", `data-count="ready">1<`)
	}
	f.h.hub.mu.Lock()
	reads := b.reads
	f.h.hub.mu.Unlock()
	if reads != 2 {
		t.Fatalf("%d reads of the queue for 3 streams and one change, want 2", reads)
	}
	for _, s := range streams {
		s.resp.Body.Close()
	}
}

// The charts of live queues start from their logs: work done before the
// dashboard started shows.
func TestChartsStartFromTheLog(t *testing.T) {
	f := newFixture(t, ReadOnlyAccess)
	f.put(f.named, "a", "b", "c")
	m, _, err := f.named.TryGet()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.named.Ack(m.Receipt); err != nil {
		t.Fatal(err)
	}
	f.kill(f.named, 1, "x")
	f.get("/") // the first chart starts the log's reading
	<-f.h.src.(*liveSource).history["mail"].done
	_, _, page := f.get("/")
	if !strings.Contains(page, `aria-label="last hour: 1 done, 1 failed`) {
		t.Fatalf("the chart does not show the log's work:\n%s", page)
	}
}

// TestDeleteAction: the item page offers Delete for an item in any state
// to a request allowed it; the POST deletes it for good and goes back to
// the list of its state; the action is logged.
func TestDeleteAction(t *testing.T) {
	f := newFixture(t, fullAccess)
	ids := f.put(f.named, "a", "b")
	dead := f.kill(f.named, 1, "x")[0]
	for _, id := range []uint64{ids[len(ids)-1], dead} {
		_, _, page := f.get(fmt.Sprintf("/q/mail/item/%d", id))
		if !strings.Contains(page, "/q/mail/delete") {
			t.Fatalf("the page of item %d offers no delete:\n%s", id, page)
		}
	}
	before := f.named.StatsNow()
	code, _ := f.post("/q/mail/delete", url.Values{"id": {fmt.Sprint(dead)}, "back": {"dead"}})
	if code != http.StatusSeeOther {
		t.Fatalf("delete: %d", code)
	}
	if st := f.named.StatsNow(); st.Items != before.Items-1 || st.Dead != before.Dead-1 {
		t.Fatalf("after delete: %d items, %d dead; before %d, %d", st.Items, st.Dead, before.Items, before.Dead)
	}
	if code, _, _ := f.get(fmt.Sprintf("/q/mail/item/%d", dead)); code != http.StatusNotFound {
		t.Fatalf("the deleted item's page: %d, want 404", code)
	}
	if logs := f.log.String(); !strings.Contains(logs, `msg="walq: dashboard action" action=delete queue=mail`) {
		t.Fatalf("no delete in the log:\n%s", logs)
	}
}
