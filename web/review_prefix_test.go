package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRawPathKeepsMountPrefix: dashboard.md: "every redirect
// stays under the prefix the dashboard is mounted at". base() takes the
// prefix from RequestURI minus URL.EscapedPath(); a path holding a byte a
// browser sends raw but Go re-escapes ('|', '^') makes EscapedPath differ
// from the raw path, base is "", and the mux's trailing-slash redirect goes
// to /q/... at the host's root; error pages load /static/style.css and
// /static/live.js from the host's root too.
func TestRawPathKeepsMountPrefix(t *testing.T) {
	f := newFixture(t, nil)
	mux := http.NewServeMux()
	mux.Handle("/ops/queues/", http.StripPrefix("/ops/queues", f.h))
	serve := func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Host = "localhost"
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	var bad []string
	for _, p := range []string{"/ops/queues/q/mail|x", "/ops/queues/q/ma^il"} {
		rec := serve(p)
		if loc := rec.Header().Get("Location"); rec.Code/100 == 3 && !strings.HasPrefix(loc, "/ops/queues/") {
			bad = append(bad, p+": "+rec.Result().Status+" to "+loc)
		}
	}
	rec := serve("/ops/queues/q/mail/item/1|")
	if strings.Contains(rec.Body.String(), `src="/static/live.js"`) {
		bad = append(bad, "/ops/queues/q/mail/item/1|: the error page loads /static/live.js, outside the mount")
	}
	if len(bad) > 0 {
		t.Fatalf("left the mount prefix /ops/queues:\n%s", strings.Join(bad, "\n"))
	}
}
