package web

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// formIDs reads the item a per-item action names (field id). It names
// one: an action on many items is a bulk action, which asks first.
func formIDs(r *http.Request) ([]uint64, error) {
	if err := r.ParseForm(); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadInput, err)
	}
	vals := r.PostForm["id"]
	if len(vals) == 0 {
		return nil, fmt.Errorf("%w: no item named", errBadInput)
	}
	if len(vals) > 1 {
		return nil, fmt.Errorf("%w: %d items named: a per-item action names one (a bulk action, which asks first, acts on many)", errBadInput, len(vals))
	}
	ids := make([]uint64, len(vals))
	for i, v := range vals {
		id, err := strconv.ParseUint(v, 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("%w: item ID %q", errBadInput, v)
		}
		ids[i] = id
	}
	return ids, nil
}

// logAction logs an action, done or refused by the queue, through the
// queue's logger.
func (h *Handler) logAction(r *http.Request, queue, what string, err error, args ...any) {
	attrs := append([]any{"action", what, "queue", queue, "remote", r.RemoteAddr}, args...)
	l := h.actor.Logger(queue)
	if err != nil {
		l.Warn("walq: dashboard action failed", append(attrs, "error", err.Error())...)
		return
	}
	l.Info("walq: dashboard action", attrs...)
}

// back sends the browser on after an action: to the item page when the
// form came from one and the item is still in the queue, else to the
// queue's dead letters or its page.
func (h *Handler) back(w http.ResponseWriter, r *http.Request, queue string, id uint64) {
	to := "/q/" + queuePath(queue) + "/"
	switch r.PostFormValue("back") {
	case "item":
		if _, err := h.src.Item(queue, id); err == nil {
			to += "item/" + strconv.FormatUint(id, 10)
		} else {
			to += "?state=dead"
		}
	case "dead", "ready", "delayed", "leased":
		to += "?state=" + r.PostFormValue("back")
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func (h *Handler) redrive(w http.ResponseWriter, r *http.Request, queue string) {
	h.onItems(w, r, queue, Redrive)
}

func (h *Handler) purge(w http.ResponseWriter, r *http.Request, queue string) {
	h.onItems(w, r, queue, Purge)
}

// delete deletes items in any state; the browser goes back to the list of
// the state the item was in (there is no item page any more).
func (h *Handler) delete(w http.ResponseWriter, r *http.Request, queue string) {
	h.onItems(w, r, queue, Delete)
}

// onItems applies an action to the items the form names, logs it, and
// sends the browser on.
func (h *Handler) onItems(w http.ResponseWriter, r *http.Request, queue string, kind ActionKind) {
	ids, err := formIDs(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if err := h.allowed(r, Action{Kind: kind, Queue: queue, Items: ids}); err != nil {
		h.fail(w, r, http.StatusForbidden, err)
		return
	}
	do := map[ActionKind]func(string, ...uint64) error{Redrive: h.actor.Redrive, Purge: h.actor.Purge, Delete: h.actor.Delete}[kind]
	err = do(queue, ids...)
	h.logAction(r, queue, string(kind), err, "ids", ids)
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	h.hub.poke(queue)
	h.back(w, r, queue, ids[0])
}

// pause reads either "for" (a duration; empty: until resumed) or
// "until" (a time).
func (h *Handler) pause(w http.ResponseWriter, r *http.Request, queue string) {
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	var until time.Time
	if s := r.PostFormValue("until"); s != "" {
		t, err := parseTime("until", s)
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, err)
			return
		}
		until = t
	} else if s := r.PostFormValue("for"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%w: pause for %q: give a positive duration such as 30m or 2h", errBadInput, s))
			return
		}
		until = time.Now().Add(d)
	}
	err := h.actor.Pause(queue, until)
	h.logAction(r, queue, string(Pause), err, slog.Time("until", until))
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	h.hub.poke(queue)
	h.back(w, r, queue, 0)
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request, queue string) {
	err := h.actor.Resume(queue)
	h.logAction(r, queue, string(Resume), err)
	if err != nil {
		h.fail(w, r, status(err), err)
		return
	}
	h.hub.poke(queue)
	h.back(w, r, queue, 0)
}
