package web

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/walq/walq"
)

// TestJoinersAndSelectorsKeptWhereTextUsesThem: the escaping path (segments)
// turns every ZWJ/ZWNJ and variation selector into an escape, and takes
// "unassigned" from Go's Unicode 15.0 tables, so ordinary text in keys,
// errors and bodies is shown broken: an emoji ZWJ sequence, a red heart
// (VS16), a keycap, Persian (ZWNJ is part of its spelling), Devanagari
// with ZWJ, and characters assigned in Unicode 15.1/16.0 (a CJK Ext. I
// ideograph, the 2024 emoji U+1FAE9).
func TestJoinersAndSelectorsKeptWhereTextUsesThem(t *testing.T) {
	legit := []string{
		"👩\u200d💻",      // woman technologist (ZWJ sequence)
		"❤\ufe0f",       // red heart, emoji presentation
		"1\ufe0f\u20e3", // keycap one
		"می\u200cخواهم", // Persian "I want" (ZWNJ)
		"क्\u200dष",     // Devanagari half form (ZWJ)
	}
	var bad []string
	for _, s := range legit {
		var shown strings.Builder
		for _, sg := range segments([]byte(s)) {
			shown.WriteString(sg.Text)
		}
		if shown.String() != s {
			bad = append(bad, strconv.QuoteToASCII(s)+" shown as "+strconv.Quote(shown.String()))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("legitimate text is shown with escapes in it:\n%s", strings.Join(bad, "\n"))
	}
	// The same characters where they only hide are still escaped, and so
	// is a code point Go's Unicode tables do not know (it may be a format
	// character of a later version).
	for _, s := range []string{"adm\u200din", "adm\u200cin", "adm\ufe0fin", "a\u200d💻", "💻\u200da", "\u200d", "\ufe0f",
		"x\u0600\u200c\u0928", "\U0002EBF0"} {
		escaped := false
		for _, sg := range segments([]byte(s)) {
			escaped = escaped || sg.Escape
		}
		if !escaped {
			t.Errorf("%s is shown with nothing escaped", strconv.QuoteToASCII(s))
		}
	}
}

// TestBulkFilterDescriptionEscapes: dashboard.md: "Every user
// string a page shows (keys, errors, bodies, filters) goes through one
// more path" escaping variation selectors and default-ignorables. The
// queue page's bulk section says "Matches {{.Form.Describe}}", which is
// strconv.Quote, not segments: it escapes Cf but leaves variation
// selectors (Mn) and Hangul fillers (Lo, default-ignorable) as they are,
// so a linked filter key "adm\ufe00in" reads "Matches key "admin"".
func TestBulkFilterDescriptionEscapes(t *testing.T) {
	f := newFixture(t, fullAccess)
	if _, err := f.named.Put(context.Background(), []byte("x"), walq.WithKey("adm\ufe00in")); err != nil {
		t.Fatal(err)
	}
	f.kill(f.named, 1, "boom")
	for _, key := range []string{"adm\ufe00in", "adm\u3164in"} {
		_, _, page := f.get("/q/mail/?" + url.Values{"state": {"dead"}, "key": {key}}.Encode())
		page = valueAttr.ReplaceAllString(page, `value=""`)
		if !strings.Contains(page, "Every dead letter this filter matches") {
			t.Fatalf("setup: no bulk section")
		}
		if j := strings.IndexAny(page, "\ufe00\u3164"); j >= 0 {
			t.Errorf("key %s reaches the page as such: %q", strconv.QuoteToASCII(key), page[max(j-40, 0):j+12])
		}
	}
}
