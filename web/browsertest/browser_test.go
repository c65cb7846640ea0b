//go:build long

package browsertest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	cdpage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/walq/walq/web"
)

// The tests in this file drive the dashboard in a real browser: Chromium
// (or Chrome) in headless mode, found on the PATH or named by
// WALQ_CHROME. Without one they skip, saying so; .ci/run installs
// Debian's chromium, so they run there.

var updateScreenshots = flag.Bool("update-screenshots", false, "write the dashboard's screenshots to docs/")

var (
	browserOnce   sync.Once
	browserCtx    context.Context
	browserCancel context.CancelFunc
	browserPath   string
)

// findBrowser returns the browser to drive, "" when there is none.
func findBrowser() string {
	if p := os.Getenv("WALQ_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func init() {
	afterTests = append(afterTests, func() {
		if browserCancel != nil {
			browserCancel()
		}
	})
}

// tab opens a new tab of the shared browser, closed when the test ends.
func tab(t *testing.T) context.Context {
	t.Helper()
	browserOnce.Do(func() {
		browserPath = findBrowser()
		if browserPath == "" {
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browserPath), chromedp.WindowSize(1280, 900))
		if os.Geteuid() == 0 {
			opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
		}
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelCtx := chromedp.NewContext(alloc)
		browserCtx = ctx
		browserCancel = func() { cancelCtx(); cancelAlloc() }
	})
	if browserPath == "" {
		const why = "no browser to drive: install chromium (apt-get install chromium) or set WALQ_CHROME to a Chrome or Chromium binary; .ci/run installs it"
		if os.Getenv("WALQ_BROWSER") == "require" {
			t.Fatal(why + " (WALQ_BROWSER=require)")
		}
		t.Skip(why)
	}
	ctx, cancel := chromedp.NewContext(browserCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", browserPath, err)
	}
	return ctx
}

func do(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

// waitFor waits until the page makes js true: the browser evaluates it
// on every animation frame.
func waitFor(t *testing.T, ctx context.Context, js string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("waiting for %s: %v", js, err)
	}
}

// load runs trigger (a click, a navigation) and waits for the page it
// loads.
func load(t *testing.T, ctx context.Context, trigger chromedp.Action[chromedp.Void]) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.WaitEvent(cdpage.LoadEventFired, nil, trigger)); err != nil {
		t.Fatal(err)
	}
}

// noDialogs fails the test if the page opens a dialog (an alert a body
// smuggled in would).
func noDialogs(t *testing.T, ctx context.Context) func() {
	dialogs := chromedp.Events(ctx, cdpage.JavascriptDialogOpening)
	opened := make(chan string, 10)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			opened <- ev.Message
			chromedp.Call(ctx, cdpage.HandleJavaScriptDialog, cdpage.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return func() {
		t.Helper()
		select {
		case m := <-opened:
			t.Fatalf("the page opened a dialog: %q", m)
		default:
		}
	}
}

func TestBrowserOverviewUpdatesLive(t *testing.T) {
	f := newFixture(t, fullAccess)
	ctx := tab(t)
	load(t, ctx, chromedp.Navigate(f.url("/")))
	waitFor(t, ctx, `document.getElementById("live").dataset.state === "open" &&
		document.querySelector('#row-mail [data-count="ready"]').textContent === "0"`)
	eval[chromedp.Void](t, ctx, `window.sameDocument = true`)
	f.put(f.named, "new item")
	waitFor(t, ctx, `document.querySelector('#row-mail [data-count="ready"]').textContent === "1"`)
	if !eval[bool](t, ctx, `window.sameDocument === true`) {
		t.Fatal("the page was reloaded")
	}
	// A hidden tab closes its stream, and opens it again when it shows.
	eval[chromedp.Void](t, ctx, `Object.defineProperty(document, "hidden", {configurable: true, get: () => true});
		document.dispatchEvent(new Event("visibilitychange"))`)
	waitFor(t, ctx, `document.getElementById("live").dataset.state === "closed"`)
	eval[chromedp.Void](t, ctx, `Object.defineProperty(document, "hidden", {configurable: true, get: () => false});
		document.dispatchEvent(new Event("visibilitychange"))`)
	f.put(f.named, "another")
	waitFor(t, ctx, `document.getElementById("live").dataset.state === "open" &&
		document.querySelector('#row-mail [data-count="ready"]').textContent === "2"`)
}

func TestBrowserRedriveClick(t *testing.T) {
	f := newFixture(t, fullAccess)
	f.put(f.named, "a", "b")
	dead := f.kill(f.named, 2, "smtp: refused")
	ctx := tab(t)
	load(t, ctx, chromedp.Navigate(f.url("/q/mail/?state=dead")))
	load(t, ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[aria-label="Redrive item %d"]`, dead[0]))))
	waitFor(t, ctx, fmt.Sprintf(`location.search === "?state=dead" && !document.getElementById("item-%d") && !!document.getElementById("item-%d")`, dead[0], dead[1]))
	if it, err := f.named.Item(dead[0]); err != nil || it.State != "ready" || it.Attempts != 0 {
		t.Fatalf("after the redrive: %+v %v", it, err)
	}
	if it, _ := f.named.Item(dead[1]); it.State != "dead" {
		t.Fatalf("the other dead letter: %+v", it)
	}
}

func TestBrowserBulkPurgeAsksThenRemovesWhatMatched(t *testing.T) {
	f := newFixture(t, fullAccess)
	f.put(f.named, "1", "2", "3", "4", "5", "6", "7")
	matched := f.kill(f.named, 4, "smtp: 550 mailbox full")
	others := f.kill(f.named, 3, "dns: timeout")
	ctx := tab(t)
	load(t, ctx, chromedp.Navigate(f.url("/q/mail/?state=dead&q=smtp")))
	if n := eval[int](t, ctx, `document.querySelectorAll("table.items tbody tr[id]").length`); n != 4 {
		t.Fatalf("the filtered list shows %d items, want 4", n)
	}
	load(t, ctx, chromedp.Click(chromedp.CSS(`section.bulk button.danger`)))
	if got := eval[string](t, ctx, `document.querySelector('#confirm-count [data-count="matched"]').textContent`); got != "4" {
		t.Fatalf("the confirmation counts %q, want 4", got)
	}
	if n := len(deadIDs(f.named)); n != 7 {
		t.Fatalf("asking purged something: %d dead letters left, want 7", n)
	}
	// Matched after T: must stay.
	late := f.put(f.named, "late")[0]
	f.kill(f.named, 1, "smtp: 550 mailbox full")
	action := eval[string](t, ctx, `document.getElementById("confirm").form.getAttribute("action")`)
	job := strings.TrimSuffix(strings.TrimPrefix(action, "/ops/queues/q/mail/jobs/"), "/run")
	load(t, ctx, chromedp.Click(chromedp.ID("confirm")))
	waitJob(t, ctx)
	dead := deadIDs(f.named)
	for _, id := range matched {
		if dead[id] {
			t.Errorf("item %d matched and is still there", id)
		}
	}
	for _, id := range append(others, late) {
		if !dead[id] {
			t.Errorf("item %d did not match at T and was purged", id)
		}
	}
	// The job is done: its page, loaded afresh, says so.
	do(t, ctx, chromedp.Navigate(f.url("/q/mail/jobs/"+job)))
	if got := eval[string](t, ctx, `document.getElementById("job-progress").dataset.state + ": " + document.getElementById("job-progress").textContent`); !strings.HasPrefix(got, "done: ") || !strings.Contains(got, "4 done, 0 skipped") {
		t.Fatalf("the job page says %q", got)
	}
}

func TestBrowserReadOnlyRefusesEveryAction(t *testing.T) {
	f := newFixture(t, web.ReadOnlyAccess)
	f.put(f.named, "a", "b")
	dead := f.kill(f.named, 1, "x")[0]
	ctx := tab(t)
	load(t, ctx, chromedp.Navigate(f.url("/q/mail/?state=dead")))
	if n := eval[int](t, ctx, `document.querySelectorAll('form[method="post"]').length`); n != 0 {
		t.Fatalf("a read-only page has %d action forms", n)
	}
	// The page offers nothing, and the server refuses what a page could
	// send all the same: same-origin requests, as a script or a forged
	// form of the page would make them.
	for path, form := range actionForms(dead) {
		js := fmt.Sprintf(`fetch(%q, {method: "POST", body: new URLSearchParams(%q), redirect: "manual"}).then(r => r.status)`,
			"/ops/queues"+path, form.Encode())
		if code := eval[int](t, ctx, js); code != http.StatusForbidden {
			t.Errorf("POST %s from the page: %d, want 403", path, code)
		}
	}
	if st := f.named.StatsNow(); st.Dead != 1 || st.Ready != 1 || st.Paused || st.Purged != 0 || st.Redriven != 0 {
		t.Fatalf("refused actions changed the queue: %+v", st)
	}
}

func TestBrowserHostileBody(t *testing.T) {
	f := newFixture(t, web.ReadOnlyAccess)
	body := "<script>alert(1)</script>\xff\xfe<img src=x onerror=alert(2)>"
	id := f.put(f.q, body)[0]
	ctx := tab(t)
	check := noDialogs(t, ctx)
	load(t, ctx, chromedp.Navigate(f.url(fmt.Sprintf("/q/_default/item/%d", id))))
	text := eval[string](t, ctx, `document.getElementById("body").textContent`)
	if !strings.HasPrefix(text, `<script>alert(1)</script>\xff\xfe<img src=x onerror=alert(2)>`) {
		t.Fatalf("the body reads %q", text)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#body script, #body img, main script").length`); n != 0 {
		t.Fatalf("the body made %d elements", n)
	}
	// The raw body downloads; it is never rendered as a page.
	dir := t.TempDir()
	if _, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dir, EventsEnabled: ptr(true),
	}); err != nil {
		t.Fatal(err)
	}
	progress := chromedp.BrowserEvents(ctx, browser.DownloadProgress)
	do(t, ctx, chromedp.Click(chromedp.ID("raw")))
	var guid string
	for ev, err := range progress {
		if err != nil {
			t.Fatal(err)
		}
		if ev.State == browser.DownloadProgressStateCompleted {
			guid = ev.GUID
			break
		}
		if ev.State == browser.DownloadProgressStateCanceled {
			t.Fatal("the download was cancelled")
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, guid))
	if err != nil || string(got) != body {
		t.Fatalf("downloaded %q, %v; want the body", got, err)
	}
	if loc := eval[string](t, ctx, `location.pathname`); loc != fmt.Sprintf("/ops/queues/q/_default/item/%d", id) {
		t.Fatalf("the download navigated to %s", loc)
	}
	check()
}

func ptr[T any](v T) *T { return &v }

// waitJob waits on the page of the bulk job it shows (where confirming
// one leads) until the job is done, loading it again while it runs.
func waitJob(t *testing.T, ctx context.Context) {
	t.Helper()
	for {
		switch state := eval[string](t, ctx, `document.getElementById("job-progress").dataset.state`); state {
		case "done":
			return
		case "running":
			load(t, ctx, chromedp.Reload())
		default:
			t.Fatalf("the job ended %q: %s", state, eval[string](t, ctx, `document.getElementById("job-progress").textContent`))
		}
	}
}

// TestBrowserScreenshots takes the overview and an item page, light and
// dark; with -update-screenshots it writes them to docs/.
func TestBrowserScreenshots(t *testing.T) {
	f := newFixture(t, fullAccess)
	ids := f.put(f.named, `{"to":"ann@example.com","subject":"Welcome"}`, `{"to":"bob@example.com"}`, `{"to":"cy@example.com"}`)
	f.put(f.q, "report 2026-01", "report 2026-02")
	f.kill(f.named, 1, "smtp: 550 mailbox unavailable")
	if err := f.named.Redrive(ids[0]); err != nil {
		t.Fatal(err)
	}
	f.kill(f.named, 1, "smtp: 550 mailbox unavailable")
	for range 2 {
		m, _, err := f.q.TryGet()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.q.Ack(m.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	f.put(f.q, "report 2026-03")
	// The charts are drawn from the logs (readHistoryFirst): the overview
	// counts what was done.
	if page := f.get("/"); !strings.Contains(page, "last hour: 2 done") {
		t.Fatalf("the default queue's chart does not count its 2 acks:\n%s", page)
	}
	ctx := tab(t)
	do(t, ctx, chromedp.EmulateViewport(1100, 700))
	pages := map[string]string{"overview": "/", "item": fmt.Sprintf("/q/mail/item/%d", ids[0])}
	shots := map[string][]byte{}
	for _, scheme := range []string{"light", "dark"} {
		if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
		}); err != nil {
			t.Fatal(err)
		}
		for name, path := range pages {
			load(t, ctx, chromedp.Navigate(f.url(path)))
			if name == "overview" {
				waitFor(t, ctx, `document.getElementById("live").dataset.state === "open"`)
			}
			shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatal(err)
			}
			shots[name+"-"+scheme] = shot
		}
	}
	for name := range pages {
		light, dark := luminance(t, shots[name+"-light"]), luminance(t, shots[name+"-dark"])
		if light < 200 || dark > 60 {
			t.Errorf("%s: background luminance %d light, %d dark: the page does not follow the color scheme", name, light, dark)
		}
	}
	if *updateScreenshots {
		for name, shot := range shots {
			if err := os.WriteFile(filepath.Join("..", "..", "docs", "dashboard-"+name+".png"), shot, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// luminance is the brightness (0-255) of a screenshot's top-left corner,
// the page's background.
func luminance(t *testing.T, shot []byte) int {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	r, g, bl, _ := img.At(b.Min.X+2, b.Max.Y-2).RGBA()
	return int((299*r + 587*g + 114*bl) / 1000 >> 8)
}

// Every control of the pages is reachable by keyboard and has a label.
func TestBrowserControlsAreLabelledAndReachable(t *testing.T) {
	f := newFixture(t, fullAccess)
	f.put(f.named, "a", "b")
	dead := f.kill(f.named, 1, "x")[0]
	ctx := tab(t)
	for _, path := range []string{"/", "/q/mail/?state=dead", "/q/mail/head", fmt.Sprintf("/q/mail/item/%d", dead)} {
		load(t, ctx, chromedp.Navigate(f.url(path)))
		unlabelled := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("input:not([type=hidden]), button, select, textarea"))
			.filter(e => !(e.labels && e.labels.length) && !e.getAttribute("aria-label") && !e.textContent.trim())
			.map(e => e.outerHTML)`)
		if len(unlabelled) > 0 {
			t.Errorf("%s: controls without a label: %v", path, unlabelled)
		}
		unreachable := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("a[href], input:not([type=hidden]), button"))
			.filter(e => e.tabIndex < 0 || e.disabled).map(e => e.outerHTML)`)
		if len(unreachable) > 0 {
			t.Errorf("%s: controls out of the tab order: %v", path, unreachable)
		}
	}
	// The first Tab reaches the skip link, and Enter follows it.
	load(t, ctx, chromedp.Navigate(f.url("/q/mail/?state=dead")))
	do(t, ctx, chromedp.KeyEvent("\t"))
	if got := eval[string](t, ctx, `document.activeElement.textContent`); got != "Skip to content" {
		t.Fatalf("the first Tab focuses %q", got)
	}
	// A dead letter can be redriven from the keyboard alone.
	do(t, ctx, chromedp.Focus(chromedp.CSS(fmt.Sprintf(`button[aria-label="Redrive item %d"]`, dead))))
	load(t, ctx, chromedp.KeyEvent("\r"))
	if it, err := f.named.Item(dead); err != nil || it.State != "ready" {
		t.Fatalf("after Enter on Redrive: %+v %v", it, err)
	}
}
