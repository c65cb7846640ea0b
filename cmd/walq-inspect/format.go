package main

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// Everything this tool prints that came from a queue directory (bodies,
// keys, error causes, file names) is data somebody else wrote, so none of it
// reaches the terminal raw: text goes through strconv.Quote, which keeps
// printable UTF-8 as it is and escapes control bytes, invalid UTF-8 (\xNN),
// and non-printing runes such as C1 controls or bidi overrides (\uNNNN).

// defaultBodyMax is how many bytes of a body a line shows by default.
const defaultBodyMax = 64

// quoteBody quotes at most max bytes of body (max <= 0: all of it), cut at
// a rune boundary, and gives the full length: `"hello" (5 B)`,
// `"a long bo"… (1200 B)`.
func quoteBody(body []byte, max int) string {
	shown := body
	cut := false
	if max > 0 && len(body) > max {
		n := max
		// Back up to the start of a rune, so that a multi-byte character is
		// not shown as broken bytes; give up after utf8.UTFMax bytes (the
		// body is not UTF-8 there anyway).
		for i := 0; i < utf8.UTFMax && n > 0 && !utf8.RuneStart(body[n]); i++ {
			n--
		}
		if !utf8.RuneStart(body[n]) {
			n = max
		}
		shown, cut = body[:n], true
	}
	q := strconv.Quote(string(shown))
	if cut {
		q += "…"
	}
	return fmt.Sprintf("%s (%d B)", q, len(body))
}

// quote quotes a string from the queue (a key, an error cause).
func quote(s string) string { return strconv.Quote(s) }

// clean makes a message safe to print: runes that do not print are escaped
// as in a Go string literal, the rest is kept as is. Messages are mostly
// ours, but they embed paths, file names and errors that carry data.
func clean(s string) string {
	if isPrintable(s) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

func isPrintable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// fileName shows a file name from a directory listing: as is when it is
// printable, quoted otherwise.
func fileName(name string) string {
	if isPrintable(name) {
		return name
	}
	return quote(name)
}

// timeLayout is how times are printed: UTC, millisecond precision, so that
// output does not depend on the reader's time zone.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// fmtTime formats a record time (Unix nanoseconds); 0 means none.
func fmtTime(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format(timeLayout)
}

// fmtDur formats a duration rounded to the millisecond (to the microsecond
// below one millisecond).
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d > -time.Millisecond && d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// fmtRel formats t relative to ref: "+30s", "-1m0s", "+0s".
func fmtRel(t, ref int64) string {
	d := time.Duration(t - ref)
	if d >= 0 {
		return "+" + fmtDur(d)
	}
	return fmtDur(d)
}

// fmtBytes gives an exact count and, from 1 KiB on, a rounded one.
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := float64(n), ""
	for _, s := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= unit
		suffix = s
		if v < unit && v > -unit {
			break
		}
	}
	return fmt.Sprintf("%d B (%.1f %s)", n, v, suffix)
}

// fmtSize gives a size for prose: exact below 1 KiB, rounded above.
func fmtSize(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	b := fmtBytes(n)
	return b[strings.IndexByte(b, '(')+1 : len(b)-1]
}

// plural gives "1 item", "2 items".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// fmtIDs lists item IDs, contracting runs: "1-3,7".
func fmtIDs(ids []uint64) string {
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		switch {
		case j == i:
			fmt.Fprintf(&b, "%d", ids[i])
		case j == i+1:
			fmt.Fprintf(&b, "%d,%d", ids[i], ids[j])
		default:
			fmt.Fprintf(&b, "%d-%d", ids[i], ids[j])
		}
		i = j + 1
	}
	return b.String()
}

// jsonString is a string that marshals to JSON with every non-printing rune
// escaped as \uNNNN. encoding/json escapes only C0 controls, so a C1 control
// or a bidi override in a key or error cause would otherwise reach the
// terminal of whoever reads the JSON lines. Invalid UTF-8 becomes U+FFFD, as
// with encoding/json; bodies, which must survive exactly, use jsonBody.
type jsonString string

func (s jsonString) MarshalJSON() ([]byte, error) {
	return appendJSONString(nil, string(s)), nil
}

func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			dst = append(dst, '\\', byte(r))
		case r == utf8.RuneError:
			dst = append(dst, `\ufffd`...)
		case r == ' ' || (strconv.IsPrint(r) && r != '<' && r != '>' && r != '&'):
			dst = utf8.AppendRune(dst, r)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			dst = fmt.Appendf(dst, `\u%04x\u%04x`, r1, r2)
		default:
			dst = fmt.Appendf(dst, `\u%04x`, r)
		}
	}
	return append(dst, '"')
}

// jsonBody holds a body in JSON without loss: "body" is the text when the
// body is valid UTF-8 (escaped as jsonString escapes), "body_base64" the
// bytes otherwise; "body_len" is always there.
type jsonBody struct {
	Text   *jsonString `json:"body,omitempty"`
	Base64 string      `json:"body_base64,omitempty"`
	Len    int         `json:"body_len"`
}

func newJSONBody(b []byte) jsonBody {
	jb := jsonBody{Len: len(b)}
	if utf8.Valid(b) {
		s := jsonString(b)
		jb.Text = &s
	} else {
		jb.Base64 = base64.StdEncoding.EncodeToString(b)
	}
	return jb
}

// jsonTime is a record time in JSON: RFC 3339 in UTC with nanoseconds, or
// null for none.
type jsonTime int64

func (t jsonTime) MarshalJSON() ([]byte, error) {
	if t == 0 {
		return []byte("null"), nil
	}
	return []byte(`"` + time.Unix(0, int64(t)).UTC().Format(time.RFC3339Nano) + `"`), nil
}
