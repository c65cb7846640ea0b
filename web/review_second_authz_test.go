package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walq/walq"
)

// TestBulkRunOutlivesTheConfirmingRequest: runJob hands the
// confirming request to the background job, whose per-item checks
// (stillMatches -> listItems -> Allow) then run after that request has
// ended and its context is cancelled. An Allow that asks a permission
// service with the request's context (here: a lookup of 50 ms that gives
// up when the context ends) refuses every item, and the confirmed purge
// skips everything it matched and counted.
func TestBulkRunOutlivesTheConfirmingRequest(t *testing.T) {
	allow := func(r *http.Request, a Action) bool {
		if a.Kind == Read && len(a.Items) > 0 {
			select {
			case <-r.Context().Done():
				return false // the lookup was cancelled
			case <-time.After(50 * time.Millisecond):
				return true
			}
		}
		return true
	}
	f := newFixtureWith(t, Options{Allow: allow})
	f.put(f.named, "a", "b", "c")
	f.kill(f.named, 3, "boom")
	id := f.prepare("/q/mail/bulk", url.Values{"action": {"purge"}, "state": {"dead"}})
	j := f.h.jobs.get(id)
	if pr := j.progress(); pr.Matched != 3 {
		t.Fatalf("setup: matched %d, want 3", pr.Matched)
	}
	if code, _ := f.post("/q/mail/jobs/"+id+"/run", nil); code != http.StatusSeeOther {
		t.Fatalf("run: %d", code)
	}
	select {
	case <-j.finished:
	case <-time.After(time.Second):
		t.Fatal("job did not finish")
	}
	if pr := j.progress(); pr.Done != 3 || len(deadIDs(f.named)) != 0 {
		t.Fatalf("confirmed purge of 3 matched dead letters: state %s, %d done, %d skipped, %d still dead: the job asked Allow with the confirming request after it ended",
			pr.State, pr.Done, pr.Skipped, len(deadIDs(f.named)))
	}
}

// TestHeadSkipsPastRefusedItems: with a per-item Allow the lists
// walk past refused items until the page is full, but the head asks the
// source for n items and then drops the refused ones: with the first 100
// ready items refused, the head (n=100) shows nothing although a readable
// item is ready next (the list page shows it).
func TestHeadSkipsPastRefusedItems(t *testing.T) {
	var firstReadable atomic.Uint64
	firstReadable.Store(1 << 62)
	allow := func(_ *http.Request, a Action) bool {
		if a.Kind == Read && len(a.Items) == 1 {
			return a.Items[0] >= firstReadable.Load()
		}
		return a.Kind == Browse || a.Kind == Read
	}
	f := newFixtureWith(t, Options{Allow: allow})
	for range 100 {
		f.put(f.named, "theirs")
	}
	mine := f.put(f.named, "mine")[0]
	firstReadable.Store(mine)
	link := "/item/" + strconv.FormatUint(mine, 10) + `"`
	if _, _, list := f.get("/q/mail/?state=ready"); !strings.Contains(list, link) {
		t.Fatalf("setup: the list does not show item %d", mine)
	}
	if _, _, head := f.get("/q/mail/head"); !strings.Contains(head, link) {
		i := strings.Index(head, "<h2>")
		t.Fatalf("the head of 100 leaves out readable ready item %d (the list shows it); page: %q", mine, head[i:i+40])
	}
}

// TestRedactedSearchCountsOnlyBodiesRead: through a redactor
// (or a per-item Allow) a body search counts every item whose errors
// match as a body searched, without reading it; the queue's own search
// counts only the bodies it read. The page then says "searched 3 bodies"
// where none was read, and the same query reads differently with and
// without FormatBody.
func TestRedactedSearchCountsOnlyBodiesRead(t *testing.T) {
	f := newFixtureWith(t, Options{FormatBody: func(_ string, _ walq.ItemView, b []byte) []byte { return b }})
	f.put(f.named, "a", "b", "c")
	f.kill(f.named, 3, "boom")
	opts := walq.ListOptions{Filter: walq.ItemFilter{State: "dead", Text: "boom", InBody: true}}
	own, err := f.named.ListItems(opts)
	if err != nil {
		t.Fatal(err)
	}
	red, err := f.h.listItems(newRequest(http.MethodGet, "/q/mail/"), "mail", opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(own.Items) != 3 || len(red.Items) != 3 {
		t.Fatalf("setup: %d and %d items", len(own.Items), len(red.Items))
	}
	if red.Searched != own.Searched {
		t.Fatalf("a search whose errors match: the queue's own search says %d bodies searched (%d bytes), through FormatBody %d (%d bytes)",
			own.Searched, own.SearchedBytes, red.Searched, red.SearchedBytes)
	}
}

// TestJobPageOnlyForThoseAllowedItsAction: "an item the request
// may not read is not listed, counted or searched". A bulk job's page
// (its link is shareable) shows any request that may read the queue the
// preparer's count and filter: a request that may read none of the
// queue's items learns how many dead letters matched the preparer's
// search (here one in bodies for "hunter2").
func TestJobPageOnlyForThoseAllowedItsAction(t *testing.T) {
	allow := func(r *http.Request, a Action) bool {
		admin := r.Header.Get("X-User") == "admin"
		switch {
		case a.Kind == Browse:
			return true
		case a.Kind == Read:
			return admin || len(a.Items) == 0
		}
		return admin
	}
	f := newFixtureWith(t, Options{Allow: allow})
	f.put(f.named, "password=hunter2", "password=hunter2", "other")
	f.kill(f.named, 3, "boom")
	req, _ := http.NewRequest(http.MethodPost, f.url("/q/mail/bulk"),
		strings.NewReader(url.Values{"action": {"purge"}, "state": {"dead"}, "q": {"hunter2"}, "body": {"1"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-User", "admin")
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, id, ok := strings.Cut(resp.Header.Get("Location"), "/jobs/")
	if resp.StatusCode != http.StatusSeeOther || !ok {
		t.Fatalf("admin's prepare: %d", resp.StatusCode)
	}
	if _, _, list := f.get("/q/mail/?state=dead"); strings.Contains(list, `id="item-`) {
		t.Fatal("setup: the other request sees items")
	}
	_, _, page := f.get("/q/mail/jobs/" + id)
	if strings.Contains(page, `data-count="matched">2<`) {
		t.Fatalf("a request that may read no item of mail is shown that 2 of them match %q in their bodies", "hunter2")
	}
}
