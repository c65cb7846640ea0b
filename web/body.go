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
// control characters, invalid UTF-8 and a BOM or bidirectional control
// (which could make text read as what it is not) become escapes. The page
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
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n <= 1:
			flush()
			out = append(out, segment{Text: fmt.Sprintf(`\x%02x`, b[0]), Escape: true})
		case r == '\n' || r == '\t':
			text.WriteRune(r)
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\uFEFF':
			flush()
			out = append(out, segment{Text: fmt.Sprintf(`\u%04x`, r), Escape: true})
		default:
			text.Write(b[:n])
		}
		b = b[n:]
	}
	flush()
	return out
}
