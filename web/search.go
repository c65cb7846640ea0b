package web

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/walq/walq"
)

// listItems is Source.ListItems as the request may see it. With
// Options.FormatBody set, a search in bodies matches what FormatBody
// returns (what the item page shows), never the stored bytes, so a
// redacted field cannot be tested by searching for a guess. With
// Options.Allow set, an item whose Read Allow refuses (asked with the
// item) is neither listed, nor counted, nor searched. Every list, count
// and bulk action goes through it.
func (h *Handler) listItems(r *http.Request, queue string, opts walq.ListOptions) (walq.ItemPage, error) {
	f := opts.Filter
	search := f.InBody && f.Text != ""
	perItem := h.opts.Allow != nil
	if !perItem && (h.opts.FormatBody == nil || !search) {
		return h.src.ListItems(queue, opts)
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, walq.MaxListLimit)
	budget := opts.Budget
	if budget <= 0 {
		budget = walq.DefaultListBudget
		if search {
			budget = walq.DefaultBodyBudget
		}
	}
	bodyBytes := opts.BodyBytesBudget()
	// The walk selects by everything else (and by the errors, when the
	// text is not looked for in bodies); a search in bodies is matched
	// here, in the errors as the source would, and in the body as shown.
	inner := opts
	if search {
		inner.Filter.Text, inner.Filter.InBody = "", false
	}
	inner.Limit = walq.MaxListLimit
	inner.BodyBytes = 0
	var out walq.ItemPage
	after := opts.After
	for {
		// The walk looks at the items of the same budget as the source's
		// own would (opts.Budget, or its default), however few of them it
		// hands here.
		inner.After = after
		inner.Budget = budget - out.Scanned
		p, err := h.src.ListItems(queue, inner)
		if err != nil {
			return walq.ItemPage{}, err
		}
		out.Scanned += p.Scanned
		out.Stored = p.Stored
		for _, it := range p.Items {
			if search && (out.Searched >= budget || (out.Searched > 0 && out.SearchedBytes >= bodyBytes)) {
				out.Next = after
				return out, nil
			}
			after = it.ID
			if perItem && !h.allows(r, Action{Kind: Read, Queue: queue, Items: []uint64{it.ID}}) {
				continue
			}
			if search {
				match, read, n := h.textIn(queue, it, f.Text)
				if read {
					out.Searched++ // as the source counts: the bodies read
					out.SearchedBytes += int64(n)
				}
				if !match {
					continue
				}
			}
			out.Items = append(out.Items, it)
			if len(out.Items) == limit {
				out.Next = it.ID
				return out, nil
			}
		}
		if p.Next == 0 {
			return out, nil
		}
		after = p.Next
		if out.Scanned >= budget {
			out.Next = after
			return out, nil
		}
	}
}

// textIn says whether text is in the item's errors or in its body as the
// dashboard shows it, whether it read the body (not when the errors
// match), and how many stored bytes that was. A body that cannot be read
// does not match.
func (h *Handler) textIn(queue string, it walq.ItemView, text string) (match, read bool, n int) {
	if strings.Contains(it.LastError, text) {
		return true, false, 0
	}
	for _, a := range it.History {
		if strings.Contains(a.Error, text) {
			return true, false, 0
		}
	}
	raw, err := h.src.ItemBody(queue, it.ID)
	if err != nil {
		return false, true, 0 // gone since the walk listed it, or unreadable
	}
	shown := raw
	if h.opts.FormatBody != nil {
		shown = h.opts.FormatBody(queue, it, raw)
	}
	return bytes.Contains(shown, []byte(text)), true, len(raw)
}
