package web

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// segment is a run of a body as the page shows it: text, or an escape
// for a byte that is not printable UTF-8 (shown as \xNN, \n kept as is).
type segment struct {
	Text   string
	Escape bool
}

// segments cuts b into text and escapes. Newlines and tabs stay text; other
// control characters, invalid UTF-8, and every character that shows as
// nothing or moves text (format characters such as bidirectional
// controls, zero-width spaces and joiners, the soft hyphen and tag
// characters; line and paragraph separators; variation selectors and
// other default-ignorable code points; private-use and unassigned ones),
// which could make text read as what it is not, become escapes. The page
// escapes every segment again as HTML, so nothing in a body is ever markup.
func segments(b []byte) []segment {
	var out []segment
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			out = append(out, segment{Text: text.String()})
			text.Reset()
		}
	}
	prev := rune(-1)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		next, _ := utf8.DecodeRune(b[n:])
		if n == len(b) {
			next = -1
		}
		switch {
		case r == utf8.RuneError && n <= 1:
			flush()
			out = append(out, segment{Text: fmt.Sprintf(`\x%02x`, b[0]), Escape: true})
		case r == '\n' || r == '\t':
			text.WriteRune(r)
		case unseen(r) && !partOfText(prev, r, next):
			flush()
			if r > 0xFFFF {
				out = append(out, segment{Text: fmt.Sprintf(`\U%08x`, r), Escape: true})
			} else {
				out = append(out, segment{Text: fmt.Sprintf(`\u%04x`, r), Escape: true})
			}
		default:
			text.Write(b[:n])
		}
		b = b[n:]
		prev = r
	}
	flush()
	return out
}

// unseen says whether r is shown as an escape: a character a reader
// cannot see for what it is.
func unseen(r rune) bool {
	return unicode.IsControl(r) ||
		unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Co, unicode.Variation_Selector,
			unicode.Other_Default_Ignorable_Code_Point, unicode.Bidi_Control) ||
		!unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs)
}

// partOfText says whether r, one of the characters unseen escapes, is
// here a working part of the text around it, as the scripts and emoji
// that need them use them: a zero-width joiner between two emoji (👩‍💻),
// a zero-width joiner or non-joiner between two characters of one of the
// scripts whose spelling uses them (Persian, the Indic scripts), an emoji
// or text presentation selector after a symbol, a punctuation mark or a
// keycap's digit (❤️, 1️⃣). Between Latin, Greek or Cyrillic letters, or
// anywhere else, they are still escaped: there they only hide.
func partOfText(prev, r, next rune) bool {
	switch r {
	case '\u200d':
		if emojiLike(prev) && emojiLike(next) {
			return true
		}
		fallthrough
	case '\u200c':
		for _, sc := range joinerScripts {
			if unicode.Is(sc, prev) && unicode.Is(sc, next) {
				return true
			}
		}
	case '\ufe0e', '\ufe0f':
		return prev >= 0 && (unicode.In(prev, unicode.S, unicode.P) || prev >= '0' && prev <= '9' || prev == '#' || prev == '*')
	}
	return false
}

// emojiLike: a symbol (most emoji are So, their skin tones Sk) or an
// emoji presentation selector, which ends the emoji before it.
func emojiLike(r rune) bool {
	return r == '\ufe0f' || r >= 0 && unicode.In(r, unicode.So, unicode.Sk)
}

// joinerScripts are the scripts whose spelling uses the zero-width joiner
// and non-joiner.
var joinerScripts = []*unicode.RangeTable{
	unicode.Arabic, unicode.Syriac, unicode.Nko, unicode.Mongolian,
	unicode.Devanagari, unicode.Bengali, unicode.Gurmukhi, unicode.Gujarati, unicode.Oriya,
	unicode.Tamil, unicode.Telugu, unicode.Kannada, unicode.Malayalam, unicode.Sinhala,
}
