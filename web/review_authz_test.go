package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestEventsRefuseUnreadableNamesAlike: with an Allow that opens
// only queue mail, a queue's pages answer 403 whether the queue exists or
// not, but /events answers 404 for a name the source lacks and 403 for one
// it has: a request that may read nothing else learns every queue name
// that exists (events asks the source before it asks Allow).
func TestEventsRefuseUnreadableNamesAlike(t *testing.T) {
	allow := func(_ *http.Request, a Action) bool {
		return a.Kind == Browse || a.Kind == Read && a.Queue == "mail"
	}
	f := newFixtureWith(t, Options{Allow: allow})
	pageHidden, _, _ := f.get("/q/" + defaultQueueName + "/")
	pageMissing, _, _ := f.get("/q/no-such-queue/")
	if pageHidden != pageMissing {
		t.Fatalf("setup: pages answer %d and %d", pageHidden, pageMissing)
	}
	hidden, _, _ := f.get("/events?queue=" + defaultQueueName)
	missing, _, _ := f.get("/events?queue=no-such-queue")
	if hidden != missing {
		t.Fatalf("/events for a queue that exists but is not open: %d; for one that does not exist: %d (pages answer %d to both): an oracle of queue names",
			hidden, missing, pageHidden)
	}
}

// TestListsAndSearchesAskReadPerItem: Allow decides Read per
// item ("access can differ per queue and per item"; an item's page and
// body name the item). An Allow that refuses item S gets 403 on S's page
// and raw body, yet a body search (body=1) reads S's body and lists S when
// a guess is in it: a substring oracle over a body the request may not
// read (and the list shows S's key and error).
func TestListsAndSearchesAskReadPerItem(t *testing.T) {
	var secret atomic.Uint64
	allow := func(_ *http.Request, a Action) bool {
		switch a.Kind {
		case Browse:
			return true
		case Read:
			return !(len(a.Items) == 1 && a.Items[0] == secret.Load())
		}
		return false
	}
	f := newFixtureWith(t, Options{Allow: allow})
	ids := f.put(f.named, "public", "password=hunter2")
	secret.Store(ids[1])
	s := strconv.FormatUint(ids[1], 10)
	for _, p := range []string{"/q/mail/item/" + s, "/q/mail/item/" + s + "/raw"} {
		if code, _, _ := f.get(p); code != http.StatusForbidden {
			t.Fatalf("setup: GET %s: %d, want 403", p, code)
		}
	}
	_, _, page := f.get("/q/mail/?" + url.Values{"state": {"ready"}, "q": {"hunter2"}, "body": {"1"}}.Encode())
	if strings.Contains(page, `id="item-`+s+`"`) {
		t.Fatalf("item %d, whose page and body Allow refuses (403), is listed by a search for %q in bodies: its body is searchable", ids[1], "hunter2")
	}
}

// TestJobPageOffersOnlyWhatIsAllowed: "a page offers only what it
// may". An operator prepares a bulk purge; a read-only request for the
// job's page (the link is shareable) is offered the "purge N items" and
// Cancel forms, which then answer 403.
func TestJobPageOffersOnlyWhatIsAllowed(t *testing.T) {
	f := newFixtureWith(t, Options{Access: func(r *http.Request) Access {
		if r.Header.Get("X-Operator") != "" {
			return FullAccess
		}
		return ReadOnly
	}})
	f.put(f.named, "a")
	f.kill(f.named, 1, "boom")
	req, _ := http.NewRequest(http.MethodPost, f.url("/q/mail/bulk"), strings.NewReader("action=purge&state=dead"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Operator", "1")
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, id, ok := strings.Cut(resp.Header.Get("Location"), "/jobs/")
	if resp.StatusCode != http.StatusSeeOther || !ok {
		t.Fatalf("operator's prepare: %d", resp.StatusCode)
	}
	_, _, page := f.get("/q/mail/jobs/" + id) // read-only
	if strings.Contains(page, "/jobs/"+id+"/run") || strings.Contains(page, "/jobs/"+id+"/cancel") {
		code, _ := f.post("/q/mail/jobs/"+id+"/run", nil)
		t.Fatalf("a read-only request's job page offers the run/cancel forms (posting run answers %d)", code)
	}
}
