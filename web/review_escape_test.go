package web

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/walq/walq"
)

// TestInvisibleCharactersShownAsEscapes: dashboard.md: the body
// is shown with "bytes that are not printable UTF-8 (and bidirectional
// controls) shown as \xNN"; every user string goes through the same path.
// segments escapes only Cc controls, bidi controls and the BOM: other
// format characters (zero width space U+200B, word joiner U+2060, soft
// hyphen U+00AD, tag characters U+E0041) reach the page as such, so the
// key "adm\u200bin" reads as "admin" and tag characters smuggle invisible
// text.
func TestInvisibleCharactersShownAsEscapes(t *testing.T) {
	f := newFixture(t, nil)
	key := "adm\u200bin\u2060\u00ad\U000E0041"
	id, err := f.named.Put(context.Background(), []byte("pay \u200b\U000E0041 now"), walq.WithKey(key))
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, p := range []string{"/q/mail/", "/q/mail/head", "/q/mail/item/" + strconv.FormatUint(id, 10)} {
		_, _, page := f.get(p)
		page = valueAttr.ReplaceAllString(page, `value=""`)
		for _, r := range []rune{'\u200b', '\u2060', '\u00ad', '\U000E0041'} {
			if strings.ContainsRune(page, r) {
				bad = append(bad, p+": "+strconv.QuoteRuneToASCII(r))
			}
		}
	}
	if len(bad) > 0 {
		t.Fatalf("invisible characters shown as such, not as escapes: %s", strings.Join(bad, ", "))
	}
}

// reviewRenamed is a Source that shows queue mail under another name, as
// a custom Source may name its queues.
type reviewRenamed struct {
	Source
	from, to string
}

func (s reviewRenamed) in(n string) string {
	if n == s.to {
		return s.from
	}
	return n
}

func (s reviewRenamed) Queues() ([]QueueSummary, error) {
	qs, err := s.Source.Queues()
	for i := range qs {
		if qs[i].Name == s.from {
			qs[i].Name = s.to
		}
	}
	return qs, err
}

func (s reviewRenamed) Queue(n string) (QueueSummary, error) {
	q, err := s.Source.Queue(s.in(n))
	if err == nil {
		q.Name = n
	}
	return q, err
}

func (s reviewRenamed) ListItems(n string, o walq.ListOptions) (walq.ItemPage, error) {
	return s.Source.ListItems(s.in(n), o)
}

func (s reviewRenamed) Head(n string, k int) ([]walq.ItemView, error) {
	return s.Source.Head(s.in(n), k)
}

func (s reviewRenamed) Item(n string, id uint64) (walq.ItemView, error) {
	return s.Source.Item(s.in(n), id)
}

func (s reviewRenamed) ItemBody(n string, id uint64) ([]byte, error) {
	return s.Source.ItemBody(s.in(n), id)
}

// TestQueueNamesShownThroughTheEscapingPath: a Source's queue name holding
// U+202E is shown as such in the overview, the queue page's heading, the
// head page and the item page (queueLabel output goes into the templates
// without the text/segs escape that keys and errors get).
func TestQueueNamesShownThroughTheEscapingPath(t *testing.T) {
	f := newFixture(t, nil)
	id := f.put(f.named, "x")[0]
	name := "invoice-\u202egnp.exe"
	h, err := New(reviewRenamed{mustSource(t, f), "mail", name}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	q := "/q/" + url.PathEscape(name)
	var bad []string
	for _, p := range []string{"/", q + "/", q + "/head", q + "/item/" + strconv.FormatUint(id, 10)} {
		page := httptestGet(t, h, p)
		if strings.Contains(page, "\u202e") {
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("queue name %q shown with its U+202E as such on %v", name, bad)
	}
}
