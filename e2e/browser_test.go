//go:build e2e

package e2e

// Browser tests: the embedded xterm.js UI in real headless Chromium from Debian's packages,
// driven with chromedp so the tests stay inside `go test` next to the binary they start.
// chromedp (not playwright-core) because it needs no Node process and no second test runner,
// and it can talk CDP directly for key events. Each test saves a screenshot in e2e/artifacts/.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

func chromiumPath(t *testing.T) string {
	t.Helper()
	return browserTool(t, "chromium", os.Getenv("MUXTERM_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-headless-shell")
}

// browserTool returns the first of paths that runs, or skips t (fails it under MUXTERM_BROWSER
// or in CI): a program of the browser tests, which `make deps-browser` installs.
func browserTool(t *testing.T, name string, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("MUXTERM_BROWSER") != "" || os.Getenv("CI") != "" {
		t.Fatalf("%s not found; `make deps-browser` installs it", name)
	}
	t.Skipf("%s not installed (set MUXTERM_BROWSER=1 to make this a failure)", name)
	return ""
}

type browser struct {
	t     *testing.T
	ctx   context.Context
	close func() // ends the browser (its sockets with it)
}

// newBrowser starts Chromium with a fresh profile and opens the gateway's auth URL, which
// sets the cookie and redirects to the UI. webgl=false adds --disable-3d-apis, so xterm.js
// renders to the DOM.
func newBrowser(t *testing.T, base, token string, webgl bool) *browser {
	t.Helper()
	b := startBrowser(t, browserOpts{webgl: webgl})
	b.open(base + "/auth?token=" + token)
	b.waitJS("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length > 0", 20*time.Second)
	b.waitPrompt()
	return b
}

type browserOpts struct {
	webgl         bool
	width, height int            // 1200×800 when zero
	flags         map[string]any // more command-line flags
}

// startBrowser starts Chromium with a fresh profile on about:blank. With webgl, WebGL runs on
// SwiftShader: Chromium 148 turns WebGL off under --disable-gpu unless ANGLE is told to use
// SwiftShader (--use-angle=swiftshader --enable-unsafe-swiftshader); without webgl,
// --disable-3d-apis makes xterm.js render to the DOM.
func startBrowser(t *testing.T, o browserOpts) *browser {
	t.Helper()
	if o.width == 0 {
		o.width, o.height = 1200, 800
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Headless,
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		// The UI follows the system's theme; headless Chromium reports light. The tests (and
		// their pixel checks) see the dark one unless they emulate another.
		chromedp.Flag("force-dark-mode", true),
		chromedp.WindowSize(o.width, o.height),
		chromedp.UserDataDir(t.TempDir()),
	}
	for k, v := range o.flags {
		opts = append(opts, chromedp.Flag(k, v))
	}
	if o.webgl {
		opts = append(opts, chromedp.Flag("use-angle", "swiftshader"), chromedp.Flag("enable-unsafe-swiftshader", true))
	} else {
		opts = append(opts, chromedp.Flag("disable-3d-apis", true))
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelB()
		cancelA()
	})
	b := &browser{t: t, ctx: ctx, close: func() {
		cancelB()
		cancelA()
	}}
	// The first Run starts the browser; it must not carry a timeout (it would bound the
	// browser's life).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start the browser: %v", err)
	}
	hook := testHookScript(t)
	if err := chromedp.Do(ctx, func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: hook})
		return chromedp.Void{}, err
	}); err != nil {
		t.Fatalf("add the test hook: %v", err)
	}
	return b
}

// testHookScript is the UI's test hook (frontend/src/testhook.ts, built apart from the pages
// the gateway serves): startBrowser has the browser evaluate it on every new document, before
// the page's own script, so the page under test is the production one and only the hook is
// added (window.muxterm).
func testHookScript(t *testing.T) string {
	t.Helper()
	p := filepath.Join(repoRoot(t), "frontend", "dist-test", "testhook.js")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("the UI's test hook: %v (make frontend, or npm run build in frontend/, builds it)", err)
	}
	return string(b)
}

// open navigates to url.
func (b *browser) open(url string) {
	b.t.Helper()
	b.run(20*time.Second, chromedp.Navigate(url))
}

// waitPrompt waits for the active tab's shell prompt.
func (b *browser) waitPrompt() {
	b.t.Helper()
	b.waitJS("/[#$] *$/.test(window.muxterm.bufferText())", 15*time.Second)
}

func (b *browser) run(d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

// eval evaluates a JS expression (awaiting a promise) and decodes the value.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("eval %s: %v", expr, err)
	}
	return v
}

// waitJS waits until expr is truthy.
func (b *browser) waitJS(expr string, d time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d+time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		b.screenshot("timeout-" + sanitize(b.t.Name()))
		b.t.Fatalf("waiting for %s: %v", expr, err)
	}
}

// waitText waits until the active tab's buffer contains want.
func (b *browser) waitText(want string, d time.Duration) {
	b.t.Helper()
	b.waitJS(fmt.Sprintf("window.muxterm.bufferText().includes(%q)", want), d)
}

// echo types "echo word" at the shell and waits for its output at a line start. word holds an
// empty quoted string (two single quotes) somewhere, so that the typed line never matches the
// output.
func (b *browser) echo(word string) {
	b.t.Helper()
	b.typeText("echo " + word + "\r")
	b.waitText("\n"+strings.ReplaceAll(word, "''", ""), 10*time.Second)
}

// typeText types s as a keyboard does: one key-down carrying the text, then the key-up (two
// events per key; chromedp's KeyEvent makes xterm.js 6 see every character twice).
func (b *browser) typeText(s string) {
	b.t.Helper()
	var steps []chromedp.Action[chromedp.Void]
	for _, r := range s {
		text, key, code, vk := string(r), string(r), "", int64(0)
		if r == '\n' || r == '\r' {
			text, key, code, vk = "\r", "Enter", "Enter", 13
		}
		down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Text: text, Key: key, Code: code, WindowsVirtualKeyCode: vk}
		up := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Key: key, Code: code, WindowsVirtualKeyCode: vk}
		steps = append(steps, keyEvent(down), keyEvent(up))
	}
	b.run(20*time.Second, steps...)
}

func keyEvent(p input.DispatchKeyEventParams) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, input.DispatchKeyEvent, p)
		return chromedp.Void{}, err
	}
}

// screenshot saves a PNG under e2e/artifacts/.
func (b *browser) screenshot(name string) {
	if png := b.shot(); png != nil {
		b.save(name, png)
	}
}

// shot captures the page as a PNG (nil, logged, when it cannot).
func (b *browser) shot() []byte {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Logf("screenshot: %v", err)
		return nil
	}
	return png
}

// save writes a PNG under e2e/artifacts/.
func (b *browser) save(name string, png []byte) {
	if err := os.MkdirAll("artifacts", 0o755); err == nil {
		_ = os.WriteFile(filepath.Join("artifacts", name+".png"), png, 0o644)
	}
}

func sanitize(s string) string { return strings.NewReplacer("/", "_", " ", "_").Replace(s) }

type tabInfo struct {
	Session string `json:"session"`
	Channel int    `json:"channel"`
	Title   string `json:"title"`
	Exited  *struct {
		Code int `json:"code"`
	} `json:"exited"`
}

func TestBrowserEchoHello(t *testing.T) {
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	defer b.screenshot("echo-hello")
	b.echo("hel''lo")
	if strings.Contains(eval[string](b, "location.href"), g.Token) {
		t.Errorf("the token stayed in the address bar")
	}
}

func TestBrowserTabsKeepTheirOutput(t *testing.T) {
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	b.echo("first-''tab")
	eval[string](b, "window.muxterm.newTab()")
	b.waitJS("window.muxterm.tabs().length === 2 && window.muxterm.activeIndex() === 1", 10*time.Second)
	b.waitPrompt()
	b.echo("second-''tab")
	b.screenshot("two-tabs")
	t0 := eval[string](b, "window.muxterm.bufferText(0)")
	t1 := eval[string](b, "window.muxterm.bufferText(1)")
	if !strings.Contains(t0, "first-tab") || strings.Contains(t0, "second") {
		t.Errorf("tab 0 holds %q", t0)
	}
	if !strings.Contains(t1, "second-tab") || strings.Contains(t1, "first") {
		t.Errorf("tab 1 holds %q", t1)
	}
}

func TestBrowserCloseTabKillsItsProcess(t *testing.T) {
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	b.typeText("echo $$ > /dev/null; echo pid-is-$((1+$$-1))\r")
	b.waitJS("/pid-is-[0-9]+/.test(window.muxterm.bufferText())", 10*time.Second)
	text := eval[string](b, "window.muxterm.bufferText()")
	var pid int
	if i := strings.LastIndex(text, "pid-is-"); i >= 0 {
		fmt.Sscanf(text[i:], "pid-is-%d", &pid)
	}
	if pid <= 0 || !testutil.Alive(pid) {
		t.Fatalf("shell pid %d not found alive in %q", pid, text)
	}
	eval[string](b, "window.muxterm.newTab()") // so closing the first does not leave zero tabs
	b.waitJS("window.muxterm.tabs().length === 2", 10*time.Second)
	eval[any](b, "window.muxterm.closeTab(0)")
	b.waitJS("window.muxterm.tabs().length === 1", 10*time.Second)
	b.screenshot("close-tab")
	testutil.WaitFor(t, 5*time.Second, "the closed tab's shell to exit", func() bool { return !testutil.Alive(pid) })
}

func TestBrowserReloadResumesSessions(t *testing.T) {
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	b.echo("before-''reload")
	before := eval[[]tabInfo](b, "window.muxterm.tabs()")
	b.run(20*time.Second, chromedp.Reload())
	b.waitJS("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length > 0", 20*time.Second)
	b.waitText("\nbefore-reload", 10*time.Second)
	b.waitPrompt()
	after := eval[[]tabInfo](b, "window.muxterm.tabs()")
	if len(after) != len(before) || after[0].Session != before[0].Session {
		t.Fatalf("tabs after reload: got %+v, want the sessions of %+v", after, before)
	}
	// It is the same shell, and it still works.
	b.echo("after-''reload")
	b.screenshot("reload-resume")
	if n := strings.Count(eval[string](b, "window.muxterm.bufferText()"), "\nbefore-reload"); n != 1 {
		t.Errorf("the replayed output appears %d times, want once", n)
	}
}

// startBehindProxy starts a gateway that a browser reaches through a cutProxy. The proxy's
// port must be an accepted Host and the gateway's port is only known after it starts, so the
// proxy's port is reserved first.
func startBehindProxy(t *testing.T, args ...string) (*gateway, *cutProxy) {
	t.Helper()
	pre, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pre.Addr().String()
	pre.Close()
	g := startGateway(t, append([]string{"--allow-host", addr}, args...)...)
	return g, newCutProxy(t, addr, strings.TrimPrefix(g.Base, "http://"))
}

func TestBrowserReconnectsAfterServerDropsSocket(t *testing.T) {
	g, p := startBehindProxy(t)
	b := newBrowser(t, p.base(), g.Token, false)
	b.echo("one-''two")
	offBefore := eval[map[string]float64](b, "window.muxterm.offsets()")
	p.cut()
	b.waitJS("window.muxterm.state() !== 'connected'", 10*time.Second)
	b.waitJS("window.muxterm.state() === 'connected'", 20*time.Second)
	b.waitPrompt()
	b.echo("three-''four")
	b.screenshot("reconnect")
	text := eval[string](b, "window.muxterm.bufferText()")
	if n := strings.Count(text, "\none-two"); n != 1 {
		t.Errorf("output before the drop appears %d times after the reconnect, want once: %q", n, text)
	}
	offAfter := eval[map[string]float64](b, "window.muxterm.offsets()")
	for s, o := range offBefore {
		if offAfter[s] < o {
			t.Errorf("session %s: offset went back from %v to %v", s, o, offAfter[s])
		}
	}
}

// TestBrowserBulkOutputWholeAcrossADrop: the visible tab with the WebGL renderer acknowledges
// output on arrival, ahead of xterm.js's parsing; a socket the proxy cuts in the middle of a bulk
// output (1.15 MB, cut after 600 kB toward the page, with output acknowledged and not yet parsed)
// loses nothing and repeats nothing: no loss is reported, and every line, those around the cut
// included (the whole output fits the page's scrollback), shows once and in order.
func TestBrowserBulkOutputWholeAcrossADrop(t *testing.T) {
	g, p := startBehindProxy(t)
	b := newBrowser(t, p.base(), g.Token, true)
	if !eval[bool](b, "document.querySelector('.xterm canvas') !== null") {
		t.Fatal("no canvas: the WebGL renderer did not load, and the DOM renderer acknowledges once parsed")
	}
	// Lines of "n<k> 000…0", at most 126 columns (the page has 157): 1.15 MB, all of it within
	// 10,000 lines of scrollback.
	const lines, pad = 9000, 120
	p.cutAfter(600_000)
	b.typeText(fmt.Sprintf("p=$(printf '%%0%dd' 0); seq 1 %d | sed \"s/^/n/; s/\\$/ $p/\"; echo do''ne\r",
		pad, lines))
	b.waitJS("window.muxterm.state() !== 'connected'", 30*time.Second)
	b.waitJS("window.muxterm.state() === 'connected'", 20*time.Second)
	b.waitText("\ndone", 60*time.Second)
	// More than a prompt's echo: whole messages of the stream were taken ahead of the parse.
	if peak := eval[float64](b, "window.muxterm.aheadPeak()"); peak < 4096 {
		t.Errorf("the tab took at most %v bytes ahead of its parsing: the read-ahead was not in use", peak)
	}
	text := eval[string](b, "window.muxterm.bufferText()")
	if strings.Contains(text, "bytes lost") {
		t.Fatalf("the page reports a loss")
	}
	linesInOrderWith(t, "the page", text, 1, lines, " "+strings.Repeat("0", pad))
}

// linesInOrder fails t unless text (what shows) holds the lines n<from> … n<to>, each once and
// in order, followed by "done".
func linesInOrder(t *testing.T, what, text string, from, to int) {
	t.Helper()
	linesInOrderWith(t, what, text, from, to, "")
}

// linesInOrderWith is linesInOrder for lines n<k> followed by suffix.
func linesInOrderWith(t *testing.T, what, text string, from, to int, suffix string) {
	t.Helper()
	i := strings.Index(text, fmt.Sprintf("\nn%d%s\n", from, suffix))
	if i < 0 {
		t.Fatalf("%s lacks line n%d: %d bytes, ending %q", what, from, len(text), text[max(0, len(text)-200):])
	}
	lines := strings.Split(text[i+1:], "\n")
	if len(lines) < to-from+2 {
		t.Fatalf("%s shows %d lines from n%d on, want n%d … n%d and done", what, len(lines), from, from, to)
	}
	for k := from; k <= to; k++ {
		if got := lines[k-from]; got != fmt.Sprintf("n%d%s", k, suffix) {
			t.Fatalf("line %d of %s reads %q, want n%d%s", k, what, got, k, suffix)
		}
	}
	if got := lines[to-from+1]; got != "done" {
		t.Errorf("after n%d %s shows %q, want done", to, what, got)
	}
}

func TestBrowserWebGLRenderer(t *testing.T) {
	g := startGateway(t)
	probe := startBrowser(t, browserOpts{webgl: true})
	if !eval[bool](probe, "!!document.createElement('canvas').getContext('webgl2')") {
		t.Skip("this Chromium has no WebGL 2 even on SwiftShader (--use-angle=swiftshader --enable-unsafe-swiftshader)")
	}
	probe.close()
	b := newBrowser(t, g.Base, g.Token, true)
	b.echo("web''gl")
	b.screenshot("webgl")
	if !eval[bool](b, "document.querySelector('.xterm canvas') !== null") {
		t.Errorf("no canvas: the WebGL renderer did not load")
	}
}

func TestBrowserTabShowsExitCode(t *testing.T) {
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	b.typeText("exit 3\r")
	b.waitJS("window.muxterm.tabs()[0].exited !== null", 10*time.Second)
	b.screenshot("exit-code")
	tabs := eval[[]tabInfo](b, "window.muxterm.tabs()")
	if tabs[0].Exited == nil || tabs[0].Exited.Code != 3 {
		t.Fatalf("tab after exit 3: got %+v, want exit code 3", tabs[0])
	}
	if !eval[bool](b, "document.body.innerText.includes('3')") {
		t.Errorf("the exit code is not shown on the page")
	}
}

// TestBrowserRepaintsWhatTheRingLost: when the ring dropped output while the page was
// disconnected, the page's re-attach is painted from the session's screen (with its history),
// not left with a hole in the stream.
func TestBrowserRepaintsWhatTheRingLost(t *testing.T) {
	g, p := startBehindProxy(t, "--scrollback", "4KiB", "--resume-hold", "0")
	b := newBrowser(t, p.base(), g.Token, false)
	session := eval[[]tabInfo](b, "window.muxterm.tabs()")[0].Session

	p.hold(true)
	p.cut()
	b.waitJS("window.muxterm.state() !== 'connected'", 10*time.Second)
	// While the page is away, make the shell print far more than the 4 KiB ring holds.
	c := g.dial(t)
	ctx := ctxT(t, 30*time.Second)
	ch, _, err := c.Attach(ctx, session, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Write([]byte("seq 1 20000\r")); err != nil {
		t.Fatal(err)
	}
	if err := ch.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "the shell to print past the ring", func() bool {
		l, err := c.List(ctx)
		return err == nil && len(l) == 1 && l[0].End > 100000
	})
	p.hold(false)
	b.waitJS("window.muxterm.state() === 'connected'", 20*time.Second)
	b.waitText("\n20000", 10*time.Second)
	if text := eval[string](b, "window.muxterm.bufferText(0)"); strings.Contains(text, "bytes lost") || !strings.Contains(text, "\n19500\n") {
		t.Errorf("after the re-attach the page shows %d bytes; want the screen and its history painted (19500 … 20000), no loss", len(text))
	}
	b.screenshot("repainted")
}

// TestBrowserHiddenTabKeepsItsOutputWhileTyping: output that a hidden tab receives while the
// visible tab is typed into yields to the typing but is parsed whole and in order.
func TestBrowserHiddenTabKeepsItsOutputWhileTyping(t *testing.T) {
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	eval[string](b, "window.muxterm.newTab()")
	b.waitJS("window.muxterm.tabs().length === 2 && window.muxterm.activeIndex() === 1", 10*time.Second)
	b.waitPrompt()
	b.typeText("seq 1 30000 | sed 's/^/n/'; echo do''ne\r")
	eval[any](b, "window.muxterm.activate(0)")
	b.waitJS("window.muxterm.activeIndex() === 0", 10*time.Second)
	for i := 0; i < 20; i++ {
		b.echo(fmt.Sprintf("typed-%d''x", i))
	}
	b.waitJS("window.muxterm.bufferText(1).includes('\\ndone')", 60*time.Second)
	text := eval[string](b, "window.muxterm.bufferText(1)")
	linesInOrder(t, "the hidden tab", text, 25000, 30000)
	b.screenshot("hidden-tab-while-typing")
}
