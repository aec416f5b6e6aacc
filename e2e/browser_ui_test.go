//go:build e2e

package e2e

// Browser tests of living in the browser UI, one per problem: a replay
// never types into the PTY, sizes follow the viewers, the page explains a missing or refused
// token, underscores survive the DOM renderer, and the shortcuts and the title work.

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/muxterm/muxterm/client"
)

// queryProgram asks the terminal DA1, OSC 10, OSC 11 and DECRQM (what vi and friends ask at
// start), then logs every byte it reads, one hex byte per line: any reply that reaches the PTY
// shows up as extra lines after READY.
const queryProgram = `printf '\033[c\033]10;?\007\033]11;?\007\033[?2004$p'; stty raw -echo; printf 'READY\r\n'; exec od -An -tx1 -v -w1`

// odBytes returns the hex bytes od printed after READY in text.
func odBytes(text string) []string {
	i := strings.LastIndex(text, "READY")
	if i < 0 {
		return nil
	}
	return regexp.MustCompile(` [0-9a-f]{2}\b`).FindAllString(text[i+len("READY"):], -1)
}

// openQuerySession starts queryProgram in a session from a Go client (which answers nothing),
// waits for READY and detaches: the ring now holds unanswered queries.
func openQuerySession(t *testing.T, g *gateway) string {
	t.Helper()
	c := g.dial(t)
	ctx := ctxT(t, 20*time.Second)
	ch, err := c.Open(ctx, client.OpenOptions{Cmd: []string{"sh", "-c", queryProgram}, Cols: 80, Rows: 24})
	if err != nil {
		t.Fatalf("open the query program: %v", err)
	}
	var out []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(out, []byte("READY")) {
		n, err := ch.ReadContext(ctx, buf)
		if err != nil {
			t.Fatalf("read until READY: %v (got %q)", err, out)
		}
		out = append(out, buf[:n]...)
	}
	if err := ch.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	return ch.Session()
}

// click clicks the element with this id (a DOM click: the handlers a mouse click runs).
func (b *browser) click(id string) {
	b.t.Helper()
	eval[any](b, fmt.Sprintf("document.getElementById(%q).click()", id))
}

// signIn types tok into the sign-in panel's field and submits it.
func (b *browser) signIn(tok string) {
	b.t.Helper()
	eval[any](b, fmt.Sprintf("(() => { document.getElementById('signin-token').value = %q; document.getElementById('signin-form').requestSubmit() })()", tok))
}

// waitAcrossLoad waits until expr is truthy while the page may navigate (a navigation fails
// the evaluation in flight; it is evaluated again on the next page).
func (b *browser) waitAcrossLoad(expr string, d time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("(() => { try { return !!("+expr+") } catch { return false } })()"))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.screenshot("timeout-" + sanitize(b.t.Name()))
			b.t.Fatalf("waiting for %s (across a page load): last error %v", expr, err)
		}
		<-tick.C
	}
}

// tabIndex returns the index of session's tab in b's page.
func tabIndex(b *browser, session string) int {
	b.t.Helper()
	for i, tb := range eval[[]tabInfo](b, "window.muxterm.tabs()") {
		if tb.Session == session {
			return i
		}
	}
	b.t.Fatalf("no tab shows session %s", session)
	return -1
}

// typeAndSee activates session's tab, types key and waits for od to log it; then the bytes the
// program read are exactly want.
func typeAndSee(b *browser, session, key string, want []string) {
	b.t.Helper()
	i := tabIndex(b, session)
	eval[any](b, fmt.Sprintf("window.muxterm.activate(%d)", i))
	b.waitJS(fmt.Sprintf("window.muxterm.activeIndex() === %d", i), 5*time.Second)
	b.typeText(key)
	b.waitJS(fmt.Sprintf("window.muxterm.bufferText(%d).includes(' %02x')", i, key[0]), 10*time.Second)
	got := odBytes(eval[string](b, fmt.Sprintf("window.muxterm.bufferText(%d)", i)))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		b.t.Fatalf("the program read %q, want only the keys typed %q", got, want)
	}
}

// TestBrowserReplayNeverTypes: a session whose ring holds DA1, OSC 10/11
// and DECRQM queries is attached from the Detached panel, after a reload, and from a second
// browser; the PTY receives only the keys typed, never xterm.js's answers to the replay.
func TestBrowserReplayNeverTypes(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh")
	b := newBrowser(t, g.Base, g.Token, false)
	session := openQuerySession(t, g)

	// Attach from the Detached panel, with real clicks.
	b.click("detached-toggle")
	attach := fmt.Sprintf(`[...document.querySelectorAll('#detached-list li')].find((li) => li.textContent.includes(%q))?.querySelector('button')`, session[:8])
	b.waitJS(attach+" != null", 10*time.Second)
	eval[any](b, attach+".click()")
	b.waitJS(fmt.Sprintf("window.muxterm.tabs().some((t) => t.session === %q)", session), 10*time.Second)
	b.waitJS(fmt.Sprintf("window.muxterm.bufferText(%d).includes('READY')", tabIndex(b, session)), 10*time.Second)
	typeAndSee(b, session, "a", []string{" 61"})
	if n := eval[int](b, fmt.Sprintf("window.muxterm.replayDropped(%d)", tabIndex(b, session))); n == 0 {
		t.Errorf("no reply was dropped: did xterm.js not answer the replayed queries?")
	}

	// Reload: every tab re-attaches and replays its ring.
	b.run(20*time.Second, chromedp.Reload())
	b.waitJS(fmt.Sprintf("window.muxterm !== undefined && window.muxterm.tabs().some((t) => t.session === %q && t.channel > 0)", session), 20*time.Second)
	b.waitJS(fmt.Sprintf("window.muxterm.bufferText(%d).includes(' 61')", tabIndex(b, session)), 10*time.Second)
	typeAndSee(b, session, "b", []string{" 61", " 62"})

	// A second viewer in another browser, while the first stays attached.
	b2 := startBrowser(t, browserOpts{width: 900, height: 700})
	b2.open(g.Base + "/auth?token=" + g.Token)
	b2.waitJS(fmt.Sprintf("window.muxterm !== undefined && window.muxterm.tabs().some((t) => t.session === %q && t.channel > 0)", session), 20*time.Second)
	b2.waitJS(fmt.Sprintf("window.muxterm.bufferText(%d).includes(' 62')", tabIndex(b2, session)), 10*time.Second)
	typeAndSee(b2, session, "c", []string{" 61", " 62", " 63"})
	b.waitJS(fmt.Sprintf("window.muxterm.bufferText(%d).includes(' 63')", tabIndex(b, session)), 10*time.Second)
	if got := odBytes(eval[string](b, fmt.Sprintf("window.muxterm.bufferText(%d)", tabIndex(b, session)))); len(got) != 3 {
		t.Errorf("the first viewer sees the program read %q, want 61 62 63", got)
	}
	b.screenshot("replay-never-types")
}

// TestBrowserKeyDuringReplayIsSent: a key typed while the page is still parsing a long replay
// reaches the program, and the replies to the queries later in that replay do not.
func TestBrowserKeyDuringReplayIsSent(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh")
	b := newBrowser(t, g.Base, g.Token, false)
	c := g.dial(t)
	ctx := ctxT(t, 30*time.Second)
	// 100,000 lines (589 KB) of replay before the queries: xterm.js parses it over many frames.
	ch, err := c.Open(ctx, client.OpenOptions{Cmd: []string{"sh", "-c", "seq 1 100000; " + queryProgram}, Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "READY"); err != nil {
		t.Fatalf("read until READY: %v", err)
	}
	if err := ch.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	during := eval[bool](b, fmt.Sprintf(`(async () => {
		const attached = window.muxterm.reattach(%q);
		for (let i = 0; i < 20000 && !window.muxterm.replaying(); i++) await new Promise((r) => setTimeout(r, 0));
		const during = window.muxterm.replaying();
		window.muxterm.input('k');
		await attached;
		return during;
	})()`, ch.Session()))
	if !during {
		t.Fatal("the replay was over before the key could be typed during it")
	}
	i := tabIndex(b, ch.Session())
	b.waitJS(fmt.Sprintf("window.muxterm.bufferText(%d).includes(' 6b')", i), 20*time.Second)
	typeAndSee(b, ch.Session(), "z", []string{" 6b", " 7a"})
}

// sttySize types `stty size` wrapped in a marker into b's active tab and returns "rows cols".
func sttySize(b *browser, mark string) string {
	b.t.Helper()
	b.typeText("echo " + mark + "-$(stty size)-E\r")
	re := regexp.MustCompile(mark + `-(\d+ \d+)-E`)
	b.waitJS(fmt.Sprintf("/%s-\\d+ \\d+-E/.test(window.muxterm.bufferText())", mark), 10*time.Second)
	m := re.FindAllStringSubmatch(eval[string](b, "window.muxterm.bufferText()"), -1)
	return m[len(m)-1][1]
}

type sizes struct {
	Term    [2]int  `json:"term"`
	Session *[2]int `json:"session"`
	Own     [2]int  `json:"own"`
}

// TestBrowserSizeFollowsViewers: two browsers at different window sizes
// on one session, under each --window-size policy: stty size follows the policy, each page
// draws the session's size (saying so where it is not its own), and when the smaller browser
// leaves the size is the remaining one's.
func TestBrowserSizeFollowsViewers(t *testing.T) {
	for _, policy := range []string{"latest", "smallest", "largest"} {
		t.Run(policy, func(t *testing.T) {
			g := startGateway(t, "--window-size", policy)
			big := newBrowser(t, g.Base, g.Token, false)
			session := eval[[]tabInfo](big, "window.muxterm.tabs()")[0].Session
			small := startBrowser(t, browserOpts{width: 800, height: 600})
			small.open(g.Base + "/auth?token=" + g.Token)
			small.waitJS(fmt.Sprintf("window.muxterm !== undefined && window.muxterm.tabs().some((t) => t.session === %q && t.channel > 0)", session), 20*time.Second)
			small.waitPrompt()
			bigOwn := eval[sizes](big, "window.muxterm.sizes()").Own
			smallOwn := eval[sizes](small, "window.muxterm.sizes()").Own
			if smallOwn[0] >= bigOwn[0] || smallOwn[1] >= bigOwn[1] {
				t.Fatalf("window sizes give %v and %v: the second should be smaller", bigOwn, smallOwn)
			}
			want := func(who [2]int) string { return fmt.Sprintf("%d %d", who[1], who[0]) }
			// Each page draws the session's size, whatever its own.
			drawn := func(b *browser, s [2]int) {
				t.Helper()
				b.waitJS(fmt.Sprintf("(() => { const s = window.muxterm.sizes(); return s.term[0] === %d && s.term[1] === %d })()", s[0], s[1]), 10*time.Second)
			}
			var expect, after [2]int
			switch policy {
			case "latest":
				// The small one attached last; then the big one types: its size wins.
				drawn(big, smallOwn)
				if got, w := sttySize(small, "S1"), want(smallOwn); got != w {
					t.Errorf("stty size in the small browser after it attached: %s, want %s", got, w)
				}
				expect = bigOwn
			case "smallest":
				expect = smallOwn
			case "largest":
				expect = bigOwn
			}
			if got, w := sttySize(big, "S2"), want(expect); got != w {
				t.Errorf("stty size in the big browser: %s, want %s", got, w)
			}
			drawn(big, expect)
			drawn(small, expect)
			if expect != bigOwn {
				note := eval[string](big, "document.querySelector('.pane.active .size-note').hidden ? '' : document.querySelector('.pane.active .size-note').textContent")
				if !strings.Contains(note, fmt.Sprintf("%d×%d", expect[0], expect[1])) {
					t.Errorf("the big page does not say the session is another viewer's size: note %q", note)
				}
			}
			big.screenshot("size-" + policy)
			// The small one leaves: the session takes the remaining viewer's size.
			small.close()
			after = bigOwn
			drawn(big, after)
			if got, w := sttySize(big, "S3"), want(after); got != w {
				t.Errorf("stty size after the small browser left: %s, want %s", got, w)
			}
			if !eval[bool](big, "document.querySelector('.pane.active .size-note').hidden") {
				t.Errorf("the size note is still shown while the session has this page's size")
			}
		})
	}
}

// noSessions asserts that the gateway has no session: the page opened none.
func noSessions(t *testing.T, g *gateway) {
	t.Helper()
	l, err := g.dial(t).List(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 0 {
		t.Errorf("the page opened %d sessions without a valid token", len(l))
	}
}

// signinShown waits for the sign-in panel and checks what it says.
func signinShown(b *browser, why string) {
	b.t.Helper()
	b.waitJS("!document.getElementById('signin').hidden", 15*time.Second)
	text := eval[string](b, "document.getElementById('signin').innerText")
	for _, want := range []string{why, "make run", "/auth?token="} {
		if !strings.Contains(text, want) {
			b.t.Errorf("the sign-in panel does not say %q:\n%s", want, text)
		}
	}
	if !eval[bool](b, "window.muxterm.signedOut() && window.muxterm.state() === 'closed'") {
		b.t.Errorf("the page still tries to connect")
	}
}

// TestBrowserExplainsSignIn: no cookie, a wrong token, and a token
// changed under a live page (the gateway restarted with another token on the same port): the
// page explains how to sign in, stops reconnecting, and opens no session.
func TestBrowserExplainsSignIn(t *testing.T) {
	t.Run("no cookie", func(t *testing.T) {
		g := startGateway(t)
		b := startBrowser(t, browserOpts{})
		b.open(g.Base + "/")
		signinShown(b, "no valid token")
		if n := eval[int](b, "window.muxterm.tabs().length"); n != 0 {
			t.Errorf("%d tabs opened", n)
		}
		// + and the new-tab shortcut open nothing that cannot open.
		b.click("new-tab")
		if n := eval[int](b, "window.muxterm.tabs().length"); n != 0 {
			t.Errorf("+ opened %d tabs", n)
		}
		noSessions(t, g)
		b.screenshot("signin-no-cookie")

		// The form: a wrong token is refused in place, the right one signs in.
		b.signIn("wrong")
		b.waitJS("!document.getElementById('signin-error').hidden", 10*time.Second)
		b.signIn(g.Token)
		b.waitAcrossLoad("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1", 20*time.Second)
		b.waitPrompt()
	})
	t.Run("wrong token", func(t *testing.T) {
		g := startGateway(t)
		b := startBrowser(t, browserOpts{})
		b.open(g.Base + "/?token=" + randomToken())
		signinShown(b, "does not accept the token in the address")
		if strings.Contains(eval[string](b, "location.href"), "token=") {
			t.Errorf("the token stayed in the address bar")
		}
		noSessions(t, g)
	})
	t.Run("old sign-in URL", func(t *testing.T) {
		g := startGateway(t)
		b := startBrowser(t, browserOpts{})
		b.open(g.Base + "/auth?token=" + randomToken())
		signinShown(b, "does not accept the token in the address")
		if href := eval[string](b, "location.href"); strings.Contains(href, "token=") || strings.Contains(href, "signin=") {
			t.Errorf("the address bar still reads %s", href)
		}
		noSessions(t, g)
	})
	t.Run("token changed under a live page", func(t *testing.T) {
		g := startGateway(t)
		b := newBrowser(t, g.Base, g.Token, false)
		addr := strings.TrimPrefix(g.Base, "http://")
		g.Stop(10 * time.Second)
		tok := randomToken()
		g2 := launchGateway(t, tok, nil, "--token", tok, "--listen", addr)
		signinShown(b, "restarted with a new one")
		n := eval[int](b, "window.muxterm.tabs().length")
		b.click("new-tab")
		if m := eval[int](b, "window.muxterm.tabs().length"); m != n {
			t.Errorf("+ opened a tab while signed out (%d -> %d)", n, m)
		}
		noSessions(t, g2)
		b.screenshot("signin-token-changed")
	})
}

// TestBrowserDOMRendererUnderscore: with the DOM renderer (no WebGL),
// the underscore of `a_b` has pixels on the screen; and no black strip under the terminal.
func TestBrowserDOMRendererUnderscore(t *testing.T) {
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	if eval[bool](b, "document.querySelector('.pane.active canvas') !== null") {
		t.Fatal("a canvas renderer is in use; this test is about the DOM renderer")
	}
	b.typeText("clear; printf 'a%sb\\n' _\r")
	b.waitJS("window.muxterm.cellRect('a_b', 1) !== null", 10*time.Second)
	type rect struct{ X, Y, W, H float64 }
	lit := func(png0 []byte, r rect) int {
		img, err := png.Decode(bytes.NewReader(png0))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for y := int(r.Y); y < int(r.Y+r.H); y++ {
			for x := int(r.X); x < int(r.X+r.W); x++ {
				c, _, _, _ := img.At(x, y).RGBA()
				if c>>8 > 0x80 { // the foreground is #d4d4d4, the background #1e1f22
					n++
				}
			}
		}
		return n
	}
	shot := func() []byte {
		ctx := b.ctx
		p, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The cursor is elsewhere (next line); the row holds only a_b.
	img := shot()
	under := eval[rect](b, "(() => { const r = window.muxterm.cellRect('a_b', 1); return {X: r.x, Y: r.y, W: r.w, H: r.h} })()")
	a := eval[rect](b, "(() => { const r = window.muxterm.cellRect('a_b', 0); return {X: r.x, Y: r.y, W: r.w, H: r.h} })()")
	if lit(img, a) == 0 {
		t.Fatalf("no pixels for 'a' at %+v: the cell geometry is off", a)
	}
	if n := lit(img, under); n == 0 {
		t.Errorf("the underscore of a_b has no pixels in its cell %+v", under)
	}
	// The strip under the terminal has the terminal's background, not black.
	if bg := eval[string](b, "getComputedStyle(document.querySelector('.pane.active .xterm-viewport')).backgroundColor"); bg != "rgb(30, 31, 34)" {
		t.Errorf("the viewport's background is %s, want the terminal's rgb(30, 31, 34)", bg)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(img))
	if err == nil {
		bottom := eval[rect](b, "(() => { const r = document.querySelector('.pane.active .xterm-screen').getBoundingClientRect(); const p = document.querySelector('.pane.active').getBoundingClientRect(); return {X: p.left, Y: r.bottom, W: p.width, H: p.bottom - r.bottom} })()")
		if bottom.H >= 1 && bottom.Y+bottom.H <= float64(cfg.Height) {
			full, _ := png.Decode(bytes.NewReader(img))
			black := 0
			for y := int(bottom.Y); y < int(bottom.Y+bottom.H); y++ {
				for x := int(bottom.X); x < int(bottom.X+bottom.W)-20; x += 7 {
					r, g, bl, _ := full.At(x, y).RGBA()
					if r>>8 < 8 && g>>8 < 8 && bl>>8 < 8 {
						black++
					}
				}
			}
			if black > 0 {
				t.Errorf("%d black pixels under the terminal (a strip of %.0f px)", black, bottom.H)
			}
		}
	}
	b.screenshot("dom-underscore")
}

// CDP's modifier bits.
const (
	modAlt   int64 = 1
	modCtrl  int64 = 2
	modShift int64 = 8
)

// key dispatches one key press with modifiers (modAlt|modShift, …) to the page.
func (b *browser) key(mods int64, key, code string, vk int64) {
	b.t.Helper()
	down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeRawKeyDown, Modifiers: mods, Key: key, Code: code, WindowsVirtualKeyCode: vk}
	up := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Modifiers: mods, Key: key, Code: code, WindowsVirtualKeyCode: vk}
	b.run(10*time.Second, keyEvent(down), keyEvent(up))
}

// TestBrowserShortcutsAndTitle: every documented shortcut reaches the
// page and does its action; the page title follows the focused terminal's title; closing a
// running tab asks first; an exited tab restarts on Enter; the tab order and the active tab
// survive a reload.
func TestBrowserShortcutsAndTitle(t *testing.T) {
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	const altShift = modAlt | modShift
	const ctrlShift = modCtrl | modShift
	shortcut := func(mods int64, key, code string, vk int64, action string) {
		t.Helper()
		eval[any](b, "window.muxterm.resetShortcut()")
		b.key(mods, key, code, vk)
		b.waitJS(fmt.Sprintf("window.muxterm.lastShortcut() === %q", action), 5*time.Second)
	}

	// The title follows the terminal's (OSC 0).
	b.typeText("printf '\\033]0;%s\\007' tab-one\r")
	b.waitJS("document.title.startsWith('tab-one')", 10*time.Second)

	shortcut(altShift, "T", "KeyT", 84, "new")
	b.waitJS("window.muxterm.tabs().length === 2 && window.muxterm.activeIndex() === 1", 10*time.Second)
	b.waitPrompt()
	b.waitJS("!document.title.startsWith('tab-one')", 5*time.Second)
	shortcut(altShift, "ArrowLeft", "ArrowLeft", 37, "prev")
	b.waitJS("window.muxterm.activeIndex() === 0 && document.title.startsWith('tab-one')", 5*time.Second)
	shortcut(altShift, "ArrowRight", "ArrowRight", 39, "next")
	b.waitJS("window.muxterm.activeIndex() === 1", 5*time.Second)
	shortcut(altShift, "{", "BracketLeft", 219, "prev")
	b.waitJS("window.muxterm.activeIndex() === 0", 5*time.Second)
	shortcut(altShift, "}", "BracketRight", 221, "next")
	b.waitJS("window.muxterm.activeIndex() === 1", 5*time.Second)

	shortcut(ctrlShift, "F", "KeyF", 70, "search")
	b.waitJS("!document.getElementById('search').hidden", 5*time.Second)
	b.key(0, "Escape", "Escape", 27)
	b.waitJS("document.getElementById('search').hidden", 5*time.Second)
	shortcut(ctrlShift, "C", "KeyC", 67, "copy")
	shortcut(ctrlShift, "V", "KeyV", 86, "paste")
	shortcut(altShift, "?", "Slash", 191, "help")
	b.waitJS("!document.getElementById('help').hidden && document.getElementById('help').innerText.includes('Alt')", 5*time.Second)
	b.screenshot("help")
	shortcut(altShift, "?", "Slash", 191, "help")
	b.waitJS("document.getElementById('help').hidden", 5*time.Second)

	// Close asks while the program runs: cancel keeps the tab, kill closes it.
	shortcut(altShift, "W", "KeyW", 87, "close")
	b.waitJS("!document.getElementById('confirm').hidden", 5*time.Second)
	b.screenshot("confirm-close")
	b.click("confirm-cancel")
	b.waitJS("document.getElementById('confirm').hidden && window.muxterm.tabs().length === 2", 5*time.Second)
	second := eval[[]tabInfo](b, "window.muxterm.tabs()")[1].Session
	shortcut(altShift, "D", "KeyD", 68, "detach")
	b.waitJS("window.muxterm.tabs().length === 1", 5*time.Second)
	if l, _ := eval[[]map[string]any](b, "window.muxterm.detached()"), 0; len(l) != 1 || l[0]["session"] != second {
		t.Errorf("after Alt+Shift+D the detached sessions are %v, want %s", l, second)
	}
	eval[any](b, fmt.Sprintf("window.muxterm.reattach(%q)", second))
	b.waitJS("window.muxterm.tabs().length === 2", 5*time.Second)
	eval[any](b, "window.muxterm.activate(1)")
	shortcut(altShift, "W", "KeyW", 87, "close")
	b.waitJS("!document.getElementById('confirm').hidden", 5*time.Second)
	b.click("confirm-kill")
	b.waitJS("window.muxterm.tabs().length === 1", 5*time.Second)

	// An exited tab restarts on Enter, in a new session.
	first := eval[[]tabInfo](b, "window.muxterm.tabs()")[0].Session
	b.typeText("exit 3\r")
	b.waitJS("window.muxterm.tabs()[0].exited !== null", 10*time.Second)
	b.waitText("press Enter to restart", 5*time.Second)
	b.typeText("\r")
	b.waitJS(fmt.Sprintf("window.muxterm.tabs()[0].exited === null && window.muxterm.tabs()[0].session !== %q && window.muxterm.tabs()[0].channel > 0", first), 10*time.Second)
	b.waitPrompt()
	b.echo("re''started")

	// Order and active tab survive a reload.
	eval[string](b, "window.muxterm.newTab()")
	eval[string](b, "window.muxterm.newTab()")
	b.waitJS("window.muxterm.tabs().length === 3 && window.muxterm.tabs().every((t) => t.channel > 0)", 10*time.Second)
	eval[any](b, "window.muxterm.moveTab(2, 0)")
	eval[any](b, "window.muxterm.activate(1)")
	before := eval[[]tabInfo](b, "window.muxterm.tabs()")
	b.run(20*time.Second, chromedp.Reload())
	b.waitJS("window.muxterm !== undefined && window.muxterm.tabs().length === 3 && window.muxterm.tabs().every((t) => t.channel > 0)", 20*time.Second)
	after := eval[[]tabInfo](b, "window.muxterm.tabs()")
	for i := range before {
		if after[i].Session != before[i].Session {
			t.Fatalf("tab order after reload: %+v, want %+v", after, before)
		}
	}
	if i := eval[int](b, "window.muxterm.activeIndex()"); i != 1 {
		t.Errorf("active tab after reload: %d, want 1", i)
	}
}

// TestBrowserReadmeScreenshot regenerates docs/ui.png, the screenshot in README.md's "Using
// the web UI", when MUXTERM_README_SCREENSHOT=1 (`make test-browser` skips it).
func TestBrowserReadmeScreenshot(t *testing.T) {
	if os.Getenv("MUXTERM_README_SCREENSHOT") == "" {
		t.Skip("set MUXTERM_README_SCREENSHOT=1 to write docs/ui.png")
	}
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	eval[string](b, "window.muxterm.newTab()")
	b.waitJS("window.muxterm.tabs().length === 2 && window.muxterm.activeIndex() === 1", 10*time.Second)
	b.waitPrompt()
	eval[any](b, "window.muxterm.detachTab(1)")
	b.waitJS("window.muxterm.tabs().length === 1", 10*time.Second)
	eval[string](b, "window.muxterm.newTab()")
	b.waitJS("window.muxterm.tabs().length === 2 && window.muxterm.activeIndex() === 1", 10*time.Second)
	b.waitPrompt()
	b.typeText("printf '\\033]0;%s\\007' build; cd / && ls -F --color=always | head -12\r")
	b.waitJS("document.title.startsWith('build')", 10*time.Second)
	b.waitText("mnt/", 10*time.Second)
	b.waitPrompt()
	b.waitJS("document.getElementById('detached-count').textContent === '1'", 10*time.Second)
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	p, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "docs", "ui.png"), p, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserLateViewerSeesTheScreen: a page that opens a full-screen program's session after
// the ring rolled over shows the screen a viewer attached throughout shows (the header drawn
// once included, no half sequence printed as text), and its Up arrow reaches the program as
// ESC O A, as the program asked with application cursor keys.
func TestBrowserLateViewerSeesTheScreen(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh", "--scrollback", "64KiB", "--window", "16KiB")
	ctx := ctxT(t, 60*time.Second)
	program := strings.Replace(fullScreenProgram, "exec sleep 600", "stty raw -echo; exec od -An -tx1 -v -w1", 1)
	b := newBrowser(t, g.Base, g.Token, false) // its own shell's tab first
	id, want := watchAll(ctx, t, g, program)
	eval[any](b, fmt.Sprintf("window.muxterm.reattach(%q)", id))
	i := tabIndex(b, id)
	b.waitJS(fmt.Sprintf("window.muxterm.bufferText(%d).includes('DONE')", i), 20*time.Second)
	if got, w := eval[string](b, fmt.Sprintf("window.muxterm.bufferText(%d)", i)), strings.Join(rows(want), "\n"); got != w {
		t.Fatalf("the late page's screen:\n%s\nwant (the viewer attached throughout):\n%s", got, w)
	}
	eval[any](b, fmt.Sprintf("window.muxterm.activate(%d)", i))
	b.key(0, "ArrowUp", "ArrowUp", 38)
	b.waitJS(fmt.Sprintf("window.muxterm.bufferText(%d).includes(' 41')", i), 10*time.Second)
	if got := regexp.MustCompile(` [0-9a-f]{2}\b`).FindAllString(eval[string](b, fmt.Sprintf("window.muxterm.bufferText(%d)", i)), -1); strings.Join(got, "") != " 1b 4f 41" {
		t.Errorf("Up reached the program as %q, want ESC O A ( 1b 4f 41)", got)
	}
	b.screenshot("late-viewer-screen")
}
