module github.com/walq/walq/web/browsertest

go 1.26.0

require (
	github.com/chromedp/cdproto v0.159.0
	github.com/chromedp/chromedp v0.23.0
	// An unpublished commit of the core module: go.work at the root of the
	// repository resolves it to the checkout (see README.md).
	github.com/walq/walq v0.0.0-20261201223745-84f86bc9bf5a
)

require github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
