package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/walq/walq"
)

// A bulk action applies redrive or purge to the dead letters a filter
// matches, in three steps, so that it never touches an item the operator
// did not see counted:
//
//  1. prepare: the filter is matched at a moment T and the IDs it matched
//     are kept with the job; the page shows their count and asks;
//  2. run (the operator confirms): the job starts in the background;
//  3. each batch takes, of the IDs matched at T, those that still match
//     the filter now, and acts on them; the others are counted as
//     skipped. The job page shows the progress.
//
// An item put after T is never touched, even if it matches.

// MaxBulk is the most items one bulk action matches: a filter that
// matches more is refused, to be narrowed.
const MaxBulk = 1_000_000

// MaxBulkBodyBytes is the most bytes of bodies one bulk action's search in
// bodies reads while it matches (a source that says what it read:
// ItemPage.SearchedBytes): past it the action is refused, as past MaxBulk.
const MaxBulkBodyBytes = 1 << 30

var bulkBodyBytes int64 = MaxBulkBodyBytes // a test lowers it

// bulkBatch is how many items one step of a job acts on.
const bulkBatch = 500

// job is one bulk action.
type job struct {
	ID        string
	Queue     string
	Kind      ActionKind
	Filter    walq.ItemFilter
	Form      filterForm
	MatchedAt time.Time
	ids       []uint64
	Matched   int

	mu      sync.Mutex
	State   string // "matching", "confirm", "running", "done", "cancelled", "failed"
	Done    int    // acted on
	Skipped int    // matched at T, no longer matching
	Err     string
	cancel  chan struct{}
	// finished is closed when the job stops running.
	finished chan struct{}
}

// progress is a copy of a job's figures for a page.
type progress struct {
	ID, Queue, QueuePath, Action, Filter, State, Err string
	MatchedAt                                        time.Time
	Matched, Done, Skipped                           int
}

func (p progress) refresh() bool { return p.State == "running" }

func (j *job) progress() progress {
	j.mu.Lock()
	defer j.mu.Unlock()
	return progress{ID: j.ID, Queue: queueLabel(j.Queue), QueuePath: queuePath(j.Queue), Action: string(j.Kind),
		Filter: j.Form.Describe(), State: j.State, Err: j.Err, MatchedAt: j.MatchedAt,
		Matched: j.Matched, Done: j.Done, Skipped: j.Skipped}
}

// jobs holds the bulk actions of a handler: the last maxJobs, of which at
// most maxHolding hold their matched IDs (up to MaxBulk each: 8 MB) while
// they wait for confirmation or run. A finished job keeps its figures and
// drops its IDs.
type jobs struct {
	mu    sync.Mutex
	byID  map[string]*job
	order []string // oldest first
	wg    sync.WaitGroup
}

const (
	maxJobs    = 64
	maxHolding = 8
)

var errTooManyJobs = errors.New("too many bulk actions are running")

func newJobs() *jobs { return &jobs{byID: make(map[string]*job)} }

// add keeps j: past maxHolding jobs that hold IDs it forgets the oldest
// waiting for confirmation, past maxJobs the oldest finished. When
// maxHolding jobs run, it refuses j.
func (js *jobs) add(j *job) error {
	js.mu.Lock()
	defer js.mu.Unlock()
	holding := 0
	for _, id := range js.order {
		if js.byID[id].holding() {
			holding++
		}
	}
	forget := func(which func(*job) bool) bool {
		for i, id := range js.order {
			if which(js.byID[id]) {
				delete(js.byID, id)
				js.order = append(js.order[:i], js.order[i+1:]...)
				return true
			}
		}
		return false
	}
	for holding >= maxHolding && forget(func(o *job) bool { return o.state() == "confirm" }) {
		holding--
	}
	for len(js.order) >= maxJobs {
		if !forget(func(o *job) bool { return !o.holding() }) {
			break
		}
	}
	if holding >= maxHolding || len(js.order) >= maxJobs {
		return fmt.Errorf("%w: %d at once, the most this dashboard runs; wait for one to finish", errTooManyJobs, maxHolding)
	}
	js.byID[j.ID] = j
	js.order = append(js.order, j.ID)
	return nil
}

func (j *job) state() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.State
}

// holding says whether j holds its matched IDs, or will: it matches,
// waits for confirmation or runs.
func (j *job) holding() bool {
	st := j.state()
	return st == "matching" || st == "confirm" || st == "running"
}

// remove forgets the job (one whose match failed).
func (js *jobs) remove(id string) {
	js.mu.Lock()
	defer js.mu.Unlock()
	delete(js.byID, id)
	js.order = slices.DeleteFunc(js.order, func(o string) bool { return o == id })
}

// count is how many jobs are kept, and how many of them hold their IDs.
func (js *jobs) count() (kept, holding int) {
	js.mu.Lock()
	defer js.mu.Unlock()
	for _, id := range js.order {
		if js.byID[id].holding() {
			holding++
		}
	}
	return len(js.order), holding
}

func (js *jobs) get(id string) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.byID[id]
}

// wait cancels every running job and waits for it to stop.
func (js *jobs) wait() {
	js.mu.Lock()
	for _, j := range js.byID {
		j.mu.Lock()
		if j.State == "running" {
			close(j.cancel)
			j.State = "cancelled"
		}
		j.mu.Unlock()
	}
	js.mu.Unlock()
	js.wg.Wait()
}

func newJobID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// bulkPrepare matches the filter now and asks for confirmation.
func (h *Handler) bulkPrepare(w http.ResponseWriter, r *http.Request, queue string) {
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	var kind ActionKind
	switch r.PostFormValue("action") {
	case "redrive":
		kind = BulkRedrive
	case "purge":
		kind = BulkPurge
	default:
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%w: bulk action %q: want redrive or purge", errBadInput, r.PostFormValue("action")))
		return
	}
	if err := h.allowed(r, Action{Kind: kind, Queue: queue}); err != nil {
		h.fail(w, r, http.StatusForbidden, err)
		return
	}
	f, ff, err := parseFilter(r.PostForm)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if f.State != "dead" {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%w: bulk %s applies to dead letters: filter state dead", errBadInput, kind))
		return
	}
	// The job takes its place among those that hold IDs before it
	// matches anything: past maxHolding it is refused before any work,
	// and a match in progress counts against the bound as its IDs will.
	j := &job{ID: newJobID(), Queue: queue, Kind: kind, Filter: f, Form: ff, State: "matching", cancel: make(chan struct{}), finished: make(chan struct{})}
	if err := h.jobs.add(j); err != nil {
		w.Header().Set("Retry-After", "5")
		h.fail(w, r, http.StatusServiceUnavailable, shownErr{err})
		return
	}
	matchedAt := time.Now()
	ids, err := h.match(r, queue, f)
	if err != nil {
		h.jobs.remove(j.ID)
		h.fail(w, r, status(err), err)
		return
	}
	j.mu.Lock()
	j.ids, j.Matched, j.MatchedAt, j.State = ids, len(ids), matchedAt, "confirm"
	j.mu.Unlock()
	// Post, then redirect to the job's page, which asks: reloading it
	// makes no second job.
	http.Redirect(w, r, j.path(), http.StatusSeeOther)
}

// path is the job's page, under its queue.
func (j *job) path() string { return "/q/" + queuePath(j.Queue) + "/jobs/" + j.ID }

var errTooMany = errors.New("the filter matches too many items")

// match returns the IDs of the queue's items that f matches now. It stops
// when ctx ends (the client left).
func (h *Handler) match(r *http.Request, queue string, f walq.ItemFilter) ([]uint64, error) {
	ctx := r.Context()
	var ids []uint64
	var after uint64
	var searched int64
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p, err := h.listItems(r, queue, walq.ListOptions{Filter: f, After: after, Limit: walq.MaxListLimit, Budget: math.MaxInt})
		if err != nil {
			return nil, err
		}
		if searched += p.SearchedBytes; searched > bulkBodyBytes {
			return nil, fmt.Errorf("%w: %w: its search in bodies reads more than %d MiB; narrow it", errBadInput, errTooMany, bulkBodyBytes>>20)
		}
		for _, it := range p.Items {
			ids = append(ids, it.ID)
		}
		if len(ids) > MaxBulk {
			return nil, fmt.Errorf("%w: %w: more than %d; narrow it", errBadInput, errTooMany, MaxBulk)
		}
		if p.Next == 0 {
			return ids, nil
		}
		after = p.Next
	}
}

// jobOf finds the job the path names, of the queue it names.
func (h *Handler) jobOf(w http.ResponseWriter, r *http.Request, queue string) *job {
	j := h.jobs.get(r.PathValue("job"))
	if j == nil || j.Queue != queue {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no bulk action %q of queue %s (the dashboard keeps the last %d)", r.PathValue("job"), queueLabel(queue), maxJobs))
		return nil
	}
	return j
}

// allowedJobOf is jobOf for a request that acts on the job: it also fails
// the request, and returns nil, when the job's action is not allowed.
func (h *Handler) allowedJobOf(w http.ResponseWriter, r *http.Request, queue string) *job {
	j := h.jobOf(w, r, queue)
	if j == nil {
		return nil
	}
	if err := h.allowed(r, Action{Kind: j.Kind, Queue: j.Queue}); err != nil {
		h.fail(w, r, http.StatusForbidden, err)
		return nil
	}
	return j
}

// bulkRun starts a confirmed job.
func (h *Handler) bulkRun(w http.ResponseWriter, r *http.Request, queue string) {
	j := h.allowedJobOf(w, r, queue)
	if j == nil {
		return
	}
	j.mu.Lock()
	if j.State != "confirm" {
		state := j.State
		j.mu.Unlock()
		h.fail(w, r, http.StatusConflict, fmt.Errorf("bulk action %s is %s, not waiting for confirmation", j.ID, state))
		return
	}
	select {
	case <-h.done:
		j.mu.Unlock()
		h.fail(w, r, http.StatusServiceUnavailable, shownErr{errors.New("the dashboard is closing")})
		return
	default:
	}
	j.State = "running"
	h.jobs.wg.Add(1)
	j.mu.Unlock()
	h.logAction(r, j.Queue, string(j.Kind), nil, "job", j.ID, "filter", j.Form.Describe(), "matched", j.Matched,
		"matched_at", j.MatchedAt.UTC())
	// The job outlives the request that confirmed it: it asks Allow with
	// that request's headers and values, under a context the request's end
	// does not cancel (an Allow that asks a permission service with it
	// must not see every item refused once the response is sent).
	go h.runJob(r.WithContext(context.WithoutCancel(r.Context())), j)
	http.Redirect(w, r, j.path(), http.StatusSeeOther)
}

// bulkCancel stops a job that waits for confirmation or runs.
func (h *Handler) bulkCancel(w http.ResponseWriter, r *http.Request, queue string) {
	j := h.allowedJobOf(w, r, queue)
	if j == nil {
		return
	}
	j.mu.Lock()
	switch j.State {
	case "confirm":
		j.State = "cancelled"
		j.ids = nil
	case "running":
		j.State = "cancelled"
		close(j.cancel)
	}
	j.mu.Unlock()
	http.Redirect(w, r, j.path(), http.StatusSeeOther)
}

func (h *Handler) runJob(r *http.Request, j *job) {
	defer h.jobs.wg.Done()
	defer close(j.finished)
	err := h.applyJob(r, j)
	j.mu.Lock()
	switch {
	case err != nil:
		j.State, j.Err = "failed", h.shown(r, err)
	case j.State == "running":
		j.State = "done"
	}
	j.ids = nil // a finished job keeps its figures only
	j.mu.Unlock()
	pr := j.progress()
	h.logAction(r, j.Queue, string(j.Kind)+" finished", err, "job", j.ID, "state", pr.State, "done", pr.Done, "skipped", pr.Skipped)
	h.hub.poke(j.Queue)
}

// applyJob acts on the job's items, batch by batch, on those that still
// match its filter.
func (h *Handler) applyJob(r *http.Request, j *job) error {
	for start := 0; start < len(j.ids); start += bulkBatch {
		select {
		case <-j.cancel:
			return nil
		default:
		}
		batch := j.ids[start:min(start+bulkBatch, len(j.ids))]
		still := make([]uint64, 0, len(batch))
		for _, id := range batch {
			ok, err := h.stillMatches(r, j, id)
			if err != nil {
				return err
			}
			if ok {
				still = append(still, id)
			}
		}
		done, err := h.apply(j, still)
		if err != nil {
			return err
		}
		j.mu.Lock()
		j.Done += done
		j.Skipped += len(batch) - done
		j.mu.Unlock()
	}
	return nil
}

// stillMatches reports whether item id matches the job's filter now.
func (h *Handler) stillMatches(r *http.Request, j *job, id uint64) (bool, error) {
	f := j.Filter
	f.ID = id
	p, err := h.listItems(r, j.Queue, walq.ListOptions{Filter: f, Limit: 1})
	if err != nil {
		return false, err
	}
	return len(p.Items) == 1, nil
}

// apply acts on ids at once; when one of them changed since it was
// checked (the call refuses the whole batch), it acts on each alone and
// counts those it could.
func (h *Handler) apply(j *job, ids []uint64) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	do := func(ids ...uint64) error {
		if j.Kind == BulkRedrive {
			return h.actor.Redrive(j.Queue, ids...)
		}
		return h.actor.Purge(j.Queue, ids...)
	}
	err := do(ids...)
	if err == nil {
		return len(ids), nil
	}
	if !errors.Is(err, walq.ErrNotFound) {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		switch err := do(id); {
		case err == nil:
			n++
		case !errors.Is(err, walq.ErrNotFound):
			return n, err
		}
	}
	return n, nil
}

// jobPage shows a job: the question while it waits for confirmation, its
// progress after.
func (h *Handler) jobPage(w http.ResponseWriter, r *http.Request, queue string) {
	// A job's page says what its filter matched for the request that made
	// it, so it is shown only to a request that may take its action: one
	// that may not read some of those items learns nothing of them here.
	j := h.allowedJobOf(w, r, queue)
	if j == nil {
		return
	}
	pr := j.progress()
	if pr.State == "confirm" {
		h.render(w, r, "confirm", pr)
		return
	}
	h.render(w, r, "job", pr)
}
