package web

import (
	"bytes"
	"strings"

	"github.com/walq/walq"
)

// listItems is Source.ListItems as a reader of the dashboard may see it:
// with Options.FormatBody set, a search in bodies matches what FormatBody
// returns (what the item page shows), never the stored bytes, so a
// redacted field cannot be tested by searching for a guess. Every list,
// count and bulk action goes through it.
func (h *Handler) listItems(queue string, opts walq.ListOptions) (walq.ItemPage, error) {
	f := opts.Filter
	if h.opts.FormatBody == nil || !f.InBody || f.Text == "" {
		return h.src.ListItems(queue, opts)
	}
	text := f.Text
	limit := opts.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, walq.MaxListLimit)
	budget := opts.Budget
	if budget <= 0 {
		budget = walq.DefaultBodyBudget
	}
	bodyBytes := opts.BodyBytesBudget()
	// The walk selects by everything else; the text is matched here, in
	// the errors as the source would, and in the formatted body.
	inner := opts
	inner.Filter.Text, inner.Filter.InBody = "", false
	inner.Limit = walq.MaxListLimit
	inner.Budget, inner.BodyBytes = 0, 0
	var out walq.ItemPage
	after := opts.After
	for {
		inner.After = after
		p, err := h.src.ListItems(queue, inner)
		if err != nil {
			return walq.ItemPage{}, err
		}
		out.Scanned += p.Scanned
		out.Stored = p.Stored
		for _, it := range p.Items {
			if out.Searched >= budget || (out.Searched > 0 && out.SearchedBytes >= bodyBytes) {
				out.Next = after
				return out, nil
			}
			out.Searched++
			after = it.ID
			match, n := h.textIn(queue, it, text)
			out.SearchedBytes += int64(n)
			if match {
				out.Items = append(out.Items, it)
				if len(out.Items) == limit {
					out.Next = it.ID
					return out, nil
				}
			}
		}
		if p.Next == 0 {
			return out, nil
		}
		after = p.Next
	}
}

// textIn says whether text is in the item's errors or in its body as the
// dashboard shows it, and how many stored bytes it read for it. A body
// that cannot be read does not match.
func (h *Handler) textIn(queue string, it walq.ItemView, text string) (bool, int) {
	if strings.Contains(it.LastError, text) {
		return true, 0
	}
	for _, a := range it.History {
		if strings.Contains(a.Error, text) {
			return true, 0
		}
	}
	raw, err := h.src.ItemBody(queue, it.ID)
	if err != nil {
		return false, 0 // gone since the walk listed it, or unreadable
	}
	return bytes.Contains(h.opts.FormatBody(queue, it, raw), []byte(text)), len(raw)
}
