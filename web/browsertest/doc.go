// Package browsertest holds the dashboard's browser tests: they drive the
// pages of package web in a real, headless Chromium (Debian's chromium,
// found on the PATH or named by WALQ_CHROME) through chromedp, clicking,
// typing and reading what the page shows.
//
// It is a module of its own so that chromedp and its protocol packages stay
// out of the core module's build list: a service that imports walq or
// walq/web never downloads them. The tests are built with the tag long and
// run in scripts/long-tests:
//
//	cd web/browsertest && go test -race -tags long ./...
//
// Without a browser they skip, saying so; with WALQ_BROWSER=require (as
// .ci/run sets it) they fail instead.
package browsertest
