package web

import (
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/walq/walq"
)

// funcs are the templates' helpers. None returns markup: everything they
// give is text that the templates escape.
var funcs = template.FuncMap{
	"num":      numAny,
	"when":     when,
	"ago":      ago,
	"until":    until,
	"dur":      dur,
	"size":     func(n int) string { return size(n) },
	"cut":      cut,
	"text":     func(s string) []segment { return segments([]byte(s)) },
	"inflight": inflight,
	"failed":   failedOf,
	"path":     queuePath,
	"qid":      url.PathEscape,
	"qarg":     url.QueryEscape,
	"label":    queueLabel,
	"inc":      func(i int) int { return i + 1 },
	"add":      func(a, b int) int { return a + b },
	"sub":      func(a, b, c int) int { return a - b - c },
	"dict2":    func(it walq.ItemView, now time.Time) itemAt { return itemAt{Item: it, Now: now} },
}

// itemAt is an item with the time a page was rendered at.
type itemAt struct {
	Item walq.ItemView
	Now  time.Time
}

// numAny is num for a template, which may hold any integer type.
func numAny(v any) string {
	switch n := v.(type) {
	case int:
		return num(n)
	case int64:
		return num(n)
	case uint64:
		return num(n)
	}
	return fmt.Sprint(v)
}

// num writes n with thousands separated by commas, any value of its type
// (the most negative int64 and uint64s past it included).
func num[T ~int | ~int64 | ~uint64](n T) string {
	var s string
	if n < 0 {
		s = strconv.FormatInt(int64(n), 10)
	} else {
		s = strconv.FormatUint(uint64(n), 10)
	}
	var b strings.Builder
	if s[0] == '-' {
		b.WriteByte('-')
		s = s[1:]
	}
	for i := 0; i < len(s); i++ {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// when writes a time in UTC to the millisecond ("" for the zero time).
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// ago writes how long before now t was.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + dur(-d)
	}
	return dur(d) + " ago"
}

// until writes how long after now t is.
func until(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := t.Sub(now)
	if d < 0 {
		return dur(-d) + " ago"
	}
	return "in " + dur(d)
}

// dur writes a duration to two units at most: 3h12m, 4m05s, 1.2s, 350ms.
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// size writes a byte count.
func size[T ~int | ~int64](n T) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// cut shortens s to n bytes at most, on a rune boundary, marking the cut.
func cut(n int, s string) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// inflight writes the leases open against the queue's cap.
func inflight(s walq.Stats) string {
	if s.MaxInFlight > 0 {
		return num(s.Leased) + " / " + num(s.MaxInFlight)
	}
	return num(s.Leased)
}
