package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestAllowScopesPerQueue gives the dashboard an Allow that opens queue
// "mail" alone, and lets a request redrive one of its dead letters: the
// overview lists mail only, every page, stream, bulk action and job of
// the default queue is refused, a redrive of another item is refused and
// changes nothing, and Allow is asked with the items each request names.
func TestAllowScopesPerQueue(t *testing.T) {
	var (
		mu      sync.Mutex
		asked   []Action
		mayRedo uint64
	)
	allow := func(_ *http.Request, a Action) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, a)
		switch a.Kind {
		case Browse:
			return true
		case Read:
			return a.Queue == "mail"
		case Redrive:
			return a.Queue == "mail" && (a.Items == nil || slices.Equal(a.Items, []uint64{mayRedo}))
		}
		return false
	}
	askedFor := func(kind ActionKind, queue string) [][]uint64 {
		mu.Lock()
		defer mu.Unlock()
		var out [][]uint64
		for _, a := range asked {
			if a.Kind == kind && a.Queue == queue {
				out = append(out, a.Items)
			}
		}
		return out
	}
	f := newFixtureWith(t, Options{Allow: allow})
	f.put(f.q, "default's own")
	defaultDead := f.kill(f.q, 1, "boom")[0]
	f.put(f.named, "a", "b")
	dead := f.kill(f.named, 2, "smtp: 550")
	mu.Lock()
	mayRedo = dead[0]
	mu.Unlock()

	code, _, page := f.get("/")
	if lists := func(path string) bool { return strings.Contains(page, `id="row-`+path+`"`) }; code != http.StatusOK || !lists("mail") || lists(defaultQueueName) {
		t.Fatalf("overview: %d, lists mail %v, lists the default queue %v", code, lists("mail"), lists(defaultQueueName))
	}
	d := "/q/" + defaultQueueName
	for _, path := range []string{d + "/", d + "/head", d + "/item/" + strconv.FormatUint(defaultDead, 10), d + "/item/" + strconv.FormatUint(defaultDead, 10) + "/raw", "/events?queue=" + defaultQueueName, "/events?queue=mail&queue=" + defaultQueueName} {
		if code, _, _ := f.get(path); code != http.StatusForbidden {
			t.Errorf("GET %s: %d, want 403", path, code)
		}
	}
	for _, path := range []string{d + "/redrive", d + "/purge", d + "/bulk", "/q/mail/bulk", "/q/mail/purge"} {
		form := url.Values{"id": {strconv.FormatUint(defaultDead, 10)}, "action": {"redrive"}, "state": {"dead"}}
		if strings.HasPrefix(path, "/q/mail/") {
			form.Set("id", strconv.FormatUint(dead[0], 10))
		}
		if code, _ := f.post(path, form); code != http.StatusForbidden {
			t.Errorf("POST %s: %d, want 403", path, code)
		}
	}
	if !deadIDs(f.q)[defaultDead] || len(deadIDs(f.named)) != 2 {
		t.Fatal("a refused action changed something")
	}

	// Mail's pages: the item's page asks Read with its ID.
	if code, _, _ := f.get("/q/mail/item/" + strconv.FormatUint(dead[1], 10)); code != http.StatusOK {
		t.Fatalf("mail's item page: %d", code)
	}
	if got := askedFor(Read, "mail"); !slices.ContainsFunc(got, func(ids []uint64) bool { return slices.Equal(ids, []uint64{dead[1]}) }) {
		t.Errorf("Allow asked Read of mail with %v, never with the item's ID %d", got, dead[1])
	}
	// A redrive is decided per item.
	if code, _ := f.post("/q/mail/redrive", url.Values{"id": {strconv.FormatUint(dead[1], 10)}}); code != http.StatusForbidden {
		t.Errorf("redrive of an item Allow refuses: %d, want 403", code)
	}
	if code, _ := f.post("/q/mail/redrive", url.Values{"id": {strconv.FormatUint(dead[0], 10)}}); code != http.StatusSeeOther {
		t.Errorf("redrive of the item Allow allows: %d, want 303", code)
	}
	if got := deadIDs(f.named); got[dead[0]] || !got[dead[1]] {
		t.Errorf("after the redrives: dead letters %v, want only %d", got, dead[1])
	}

	// A stream that names no queue watches the queues the request may read.
	openStream(t, f, "")
	f.h.hub.mu.Lock()
	var watched []string
	for n, b := range f.h.hub.byName {
		if b != nil {
			watched = append(watched, n)
		}
	}
	f.h.hub.mu.Unlock()
	if !slices.Equal(watched, []string{"mail"}) {
		t.Errorf("a stream naming no queue watches %q, want only mail", watched)
	}
}

// TestAllowOrAccess: New takes one hook, not both.
func TestAllowOrAccess(t *testing.T) {
	src, err := Queues(newFixture(t, fullAccess).q)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(src, Options{Access: ReadOnlyAccess, Allow: func(*http.Request, Action) bool { return true }})
	if err == nil || !strings.Contains(err.Error(), "set one") {
		t.Fatalf("New with Allow and Access: %v", err)
	}
}

// TestReadOnlySourceRefusesItemActions: over a Source that is not an
// Actor, a per-item action is refused (403) whatever Access says.
func TestReadOnlySourceRefusesItemActions(t *testing.T) {
	f := newFixture(t, fullAccess)
	f.put(f.named, "a")
	id := f.kill(f.named, 1, "boom")[0]
	src, err := Queues(f.q, f.named)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(struct{ Source }{src}, Options{Access: fullAccess})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, kind := range []string{"redrive", "purge", "delete"} {
		req := newRequest(http.MethodPost, "/q/mail/"+kind)
		req.Body = io.NopCloser(strings.NewReader("id=" + strconv.FormatUint(id, 10)))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "read-only") {
			t.Errorf("%s over a read-only source: %d %q", kind, rec.Code, rec.Body.String())
		}
	}
	if !deadIDs(f.named)[id] {
		t.Fatal("the dead letter is gone")
	}
}
