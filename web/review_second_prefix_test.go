package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHashInPathKeepsMountPrefix: "every redirect and link stays
// under the prefix the dashboard is mounted at, however the request
// spells its path". A request target holding a literal '#' (sent by any
// client but a browser; Go keeps it in the path) makes base() cut the
// RequestURI at the '#' while r.URL.Path keeps it: neither comparison
// holds, base returns "", and the redirect and the page's links leave the
// mount.
func TestHashInPathKeepsMountPrefix(t *testing.T) {
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
	rec := serve("/ops/queues/q/mail#x")
	if loc := rec.Header().Get("Location"); rec.Code/100 == 3 && !strings.HasPrefix(loc, "/ops/queues/") {
		bad = append(bad, "/ops/queues/q/mail#x: "+rec.Result().Status+" to "+loc)
	}
	rec = serve("/ops/queues/q/mail/item/1#")
	if strings.Contains(rec.Body.String(), `src="/static/live.js"`) {
		bad = append(bad, "/ops/queues/q/mail/item/1#: "+rec.Result().Status+" page loads /static/live.js, outside the mount")
	}
	if len(bad) > 0 {
		t.Fatalf("left the mount prefix /ops/queues:\n%s", strings.Join(bad, "\n"))
	}
}
