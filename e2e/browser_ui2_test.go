//go:build e2e

package e2e

// Browser tests of the UI's sizes with WebGL, its help and its header, and of coming back to
// a page: hidden tabs take the visible tab's measure, Escape closes the help, the header stays
// one line at 900 px, and a page restored from the back-forward cache reconnects.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/muxterm/muxterm/client"
)

// reload reloads the page.
func (b *browser) reload() {
	b.t.Helper()
	b.run(20*time.Second, chromedp.Reload())
}

// webglBrowser starts Chromium with WebGL (SwiftShader), skipping when it has none.
func webglBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	b := startBrowser(t, browserOpts{webgl: true, width: width, height: height})
	if !eval[bool](b, "!!document.createElement('canvas').getContext('webgl2')") {
		t.Skip("this Chromium has no WebGL 2 even on SwiftShader")
	}
	return b
}

// TestBrowserHiddenTabsTakeTheVisibleSize: with the WebGL renderer, three tabs survive a
// reload; the sessions of the tabs attached hidden get the visible tab's measure (not the DOM
// renderer's narrower one), and no tab shows the "(another viewer)" note, there being none.
func TestBrowserHiddenTabsTakeTheVisibleSize(t *testing.T) {
	g := startGateway(t)
	b := webglBrowser(t, 1280, 900)
	b.open(g.Base + "/auth?token=" + g.Token)
	b.waitJS("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1", 20*time.Second)
	b.waitPrompt()
	for range 2 {
		eval[string](b, "window.muxterm.newTab()")
	}
	b.waitJS("window.muxterm.tabs().length === 3 && window.muxterm.tabs().every((t) => t.channel > 0)", 10*time.Second)
	eval[any](b, "window.muxterm.activate(1)")
	b.waitJS("document.querySelector('.pane.active canvas') !== null", 5*time.Second)

	b.reload()
	b.waitJS("window.muxterm !== undefined && window.muxterm.tabs().length === 3 && window.muxterm.tabs().every((t) => t.channel > 0)", 20*time.Second)
	b.waitJS("window.muxterm.activeIndex() === 1 && document.querySelector('.pane.active canvas') !== null", 5*time.Second)
	own := eval[sizes](b, "window.muxterm.sizes()").Own
	c := g.dial(t)
	ctx := ctxT(t, 20*time.Second)
	var last string
	ok := false
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); <-tick.C {
		l, err := c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last, ok = "", len(l) == 3
		for _, s := range l {
			last += fmt.Sprintf(" %d×%d", s.Cols, s.Rows)
			ok = ok && s.Cols == own[0] && s.Rows == own[1]
		}
		if ok {
			break
		}
	}
	if !ok {
		t.Errorf("after the reload the sessions are%s; want all at the visible tab's %d×%d", last, own[0], own[1])
	}
	for i := range 3 {
		eval[any](b, fmt.Sprintf("window.muxterm.activate(%d)", i))
		b.waitJS(fmt.Sprintf("window.muxterm.activeIndex() === %d", i), 5*time.Second)
		s := eval[sizes](b, fmt.Sprintf("window.muxterm.sizes(%d)", i))
		if s.Session == nil || *s.Session != own || s.Own != own || s.Term != own {
			t.Errorf("tab %d: sizes %+v, want all %v", i, s, own)
		}
		if eval[bool](b, "!document.querySelector('.pane.active .size-note').hidden || document.querySelector('.pane.active').classList.contains('foreign-size')") {
			t.Errorf("tab %d shows %q with no other viewer", i, eval[string](b, "document.querySelector('.pane.active .size-note').textContent"))
		}
	}
	b.screenshot("hidden-tabs-size")
}

// TestBrowserHelpAndNarrowHeader: Escape closes the help; at 900 px with four tabs and the
// search box open, the header is one row and the first tab is whole on the screen.
func TestBrowserHelpAndNarrowHeader(t *testing.T) {
	g := startGateway(t)
	b := startBrowser(t, browserOpts{width: 900, height: 700})
	b.open(g.Base + "/auth?token=" + g.Token)
	b.waitJS("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1", 20*time.Second)
	b.waitPrompt()

	b.click("help-toggle")
	b.waitJS("!document.getElementById('help').hidden", 5*time.Second)
	b.key(0, "Escape", "Escape", 27)
	b.waitJS("document.getElementById('help').hidden", 5*time.Second)
	if !eval[bool](b, "document.activeElement === document.querySelector('.pane.active textarea')") {
		t.Errorf("after Escape the terminal does not have the focus")
	}

	for range 3 {
		eval[string](b, "window.muxterm.newTab()")
	}
	b.waitJS("window.muxterm.tabs().length === 4 && window.muxterm.tabs().every((t) => t.channel > 0)", 10*time.Second)
	b.key(modCtrl|modShift, "F", "KeyF", 70) // the search box takes room in the header too
	b.waitJS("!document.getElementById('search').hidden", 5*time.Second)
	eval[any](b, "window.muxterm.activate(3)")
	b.screenshot("header-900")
	type box struct{ Top, Bottom, Left, Right, Width float64 }
	bar := eval[box](b, "(() => { const r = document.getElementById('bar').getBoundingClientRect(); return {Top: r.top, Bottom: r.bottom, Left: r.left, Right: r.right, Width: innerWidth} })()")
	kids := eval[[]box](b, `[...document.querySelectorAll('#bar > *')].filter((e) => !e.hidden && getComputedStyle(e).display !== 'none').map((e) => { const r = e.getBoundingClientRect(); return {Top: r.top, Bottom: r.bottom, Left: r.left, Right: r.right} })`)
	for i, k := range kids {
		if k.Top < bar.Top-0.5 || k.Bottom > bar.Bottom+0.5 || k.Right > bar.Width+0.5 || k.Left < -0.5 {
			t.Errorf("header item %d at %+v is outside the header's one row %+v", i, k, bar)
		}
	}
	first := eval[box](b, "(() => { const r = document.querySelector('#tabs .tab').getBoundingClientRect(); return {Top: r.top, Bottom: r.bottom, Left: r.left, Right: r.right} })()")
	nav := eval[box](b, "(() => { const r = document.getElementById('tabs').getBoundingClientRect(); return {Top: r.top, Bottom: r.bottom, Left: r.left, Right: r.right} })()")
	if first.Left < nav.Left-0.5 || first.Right-first.Left < 60 {
		t.Errorf("the first tab is cut off: %+v in the tab strip %+v", first, nav)
	}
}

// TestBrowserTwoGatewaysOneHost: one browser signs in to two gateways on 127.0.0.1, on two
// ports; each keeps its cookie, so both pages stay signed in and reconnect after a reload.
func TestBrowserTwoGatewaysOneHost(t *testing.T) {
	g1 := startGateway(t)
	g2 := startGateway(t)
	b := startBrowser(t, browserOpts{})
	b.open(g1.Base + "/auth?token=" + g1.Token)
	b.waitJS("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1", 20*time.Second)
	b.open(g2.Base + "/auth?token=" + g2.Token)
	b.waitJS("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1", 20*time.Second)
	for _, g := range []*gateway{g1, g2, g1} {
		b.open(g.Base + "/")
		b.waitJS("window.muxterm !== undefined && (window.muxterm.signedOut() || (window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1))", 20*time.Second)
		if eval[bool](b, "window.muxterm.signedOut()") {
			t.Fatalf("the page of %s is signed out after signing in to the other gateway", g.Base)
		}
		b.waitPrompt()
	}
}

// echoAcross is echo for a page restored from the back-forward cache, where chromedp's Poll
// no longer finds the page's context: it waits with waitAcrossLoad.
func (b *browser) echoAcross(word string) {
	b.t.Helper()
	b.typeText("echo " + word + "\r")
	b.waitAcrossLoad(fmt.Sprintf("window.muxterm.bufferText().includes(%q)", "\n"+strings.ReplaceAll(word, "''", "")), 10*time.Second)
}

// TestBrowserBackForwardCache: the page left for another and restored from the back-forward
// cache (its scripts frozen, its socket closed by the browser) reconnects at once and resumes:
// the same shell, its output once, and typing works.
func TestBrowserBackForwardCache(t *testing.T) {
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	b.echo("before-''away")
	session := eval[[]tabInfo](b, "window.muxterm.tabs()")[0].Session
	eval[any](b, "window.bfcacheMark = 1") // survives only a restore from the cache
	b.open(g.Base + "/healthz")
	eval[any](b, "history.back()") // a restore from the cache fires no load event to wait for
	b.waitAcrossLoad("location.pathname === '/' && window.muxterm !== undefined", 10*time.Second)
	if !eval[bool](b, "window.bfcacheMark === 1") {
		t.Fatalf("the page was loaded again, not restored from the back-forward cache: %s", eval[string](b, "JSON.stringify(performance.getEntriesByType('navigation').map((e) => e.notRestoredReasons ?? null))"))
	}
	start := time.Now()
	b.waitAcrossLoad("window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1 && window.muxterm.tabs()[0].channel > 0", 10*time.Second)
	t.Logf("FIGURE connected %v after the restore", time.Since(start).Round(time.Millisecond))
	if got := eval[[]tabInfo](b, "window.muxterm.tabs()")[0].Session; got != session {
		t.Fatalf("after coming back the tab shows %s, want %s", got, session)
	}
	b.echoAcross("after-''back")
	if n := strings.Count(eval[string](b, "window.muxterm.bufferText()"), "\nbefore-away"); n != 1 {
		t.Errorf("the output before leaving appears %d times, want once", n)
	}
}

// TestBrowserWakesUp: the network drops the page's socket without a word (the proxy swallows
// both directions, as when a laptop sleeps: the browser learns nothing for minutes); when the
// page is shown again (visibilitychange), and another time when the network is back (online),
// it finds the socket dead within seconds, reconnects and resumes: what is typed reaches the
// shell, and the output before appears once.
func TestBrowserWakesUp(t *testing.T) {
	g, p := startBehindProxy(t)
	b := newBrowser(t, p.base(), g.Token, false)
	b.echo("before-''sleep")
	for i, event := range []string{"document.dispatchEvent(new Event('visibilitychange'))", "window.dispatchEvent(new Event('online'))"} {
		p.stall()
		eval[any](b, event)
		start := time.Now()
		b.waitJS("window.muxterm.state() !== 'connected'", 10*time.Second)
		b.waitJS("window.muxterm.state() === 'connected'", 20*time.Second)
		t.Logf("FIGURE %s: reconnected %v after it", event, time.Since(start).Round(time.Millisecond))
		b.echo(fmt.Sprintf("after-''wake-%d", i))
	}
	if n := strings.Count(eval[string](b, "window.muxterm.bufferText()"), "\nbefore-sleep"); n != 1 {
		t.Errorf("the output before the sleep appears %d times, want once", n)
	}
}

// TestBrowserSettingsKept: the theme follows the system's (light here) by default; font size,
// theme and renderer set in the settings panel apply at once (the session gets the size the
// new font fits) and are the same after a reload.
func TestBrowserSettingsKept(t *testing.T) {
	g := startGateway(t)
	b := webglBrowser(t, 1200, 800)
	b.run(10*time.Second, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "light"}}})
		return chromedp.Void{}, err
	})
	b.open(g.Base + "/auth?token=" + g.Token)
	b.waitJS("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1", 20*time.Second)
	b.waitPrompt()
	const bg = "getComputedStyle(document.querySelector('.pane.active .xterm-viewport')).backgroundColor"
	if theme, got := eval[string](b, "document.documentElement.dataset.theme ?? ''"), eval[string](b, bg); theme != "light" || got != "rgb(250, 250, 250)" {
		t.Errorf("under a light system the page's theme is %q and the terminal's background %s; want light, rgb(250, 250, 250)", theme, got)
	}
	if !eval[bool](b, "document.querySelector('.pane.active canvas') !== null") {
		t.Errorf("no WebGL canvas by default")
	}
	before := eval[sizes](b, "window.muxterm.sizes()").Own

	b.click("settings-toggle")
	b.waitJS("!document.getElementById('settings').hidden", 5*time.Second)
	b.screenshot("settings")
	for id, v := range map[string]string{"set-font": "18", "set-theme": "dark", "set-renderer": "dom"} {
		eval[any](b, fmt.Sprintf("(() => { const e = document.getElementById(%q); e.value = %q; e.dispatchEvent(new Event('change')) })()", id, v))
	}
	b.key(0, "Escape", "Escape", 27)
	b.waitJS("document.getElementById('settings').hidden", 5*time.Second)

	check := func(when string) {
		t.Helper()
		b.waitJS("document.querySelector('.pane.active canvas') === null && getComputedStyle(document.querySelector('.pane.active .xterm-rows')).fontSize === '18px'", 5*time.Second)
		if theme, got := eval[string](b, "document.documentElement.dataset.theme ?? ''"), eval[string](b, bg); theme != "dark" || got != "rgb(30, 31, 34)" {
			t.Errorf("%s: theme %q, background %s; want dark, rgb(30, 31, 34)", when, theme, got)
		}
		own := eval[sizes](b, "window.muxterm.sizes()").Own
		if own[0] >= before[0] || own[1] >= before[1] {
			t.Errorf("%s: at 18 px the tab fits %v, not less than %v at 14 px", when, own, before)
		}
		b.waitJS(fmt.Sprintf("(() => { const s = window.muxterm.sizes(); return s.session && s.session[0] === %d && s.session[1] === %d })()", own[0], own[1]), 5*time.Second)
		if got, w := sttySize(b, "SZ"+strings.ReplaceAll(when, " ", "")), fmt.Sprintf("%d %d", own[1], own[0]); got != w {
			t.Errorf("%s: stty size %s, want %s", when, got, w)
		}
	}
	check("set")
	b.reload()
	b.waitJS("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1 && window.muxterm.tabs()[0].channel > 0", 20*time.Second)
	check("after reload")
	b.click("settings-toggle")
	if got := eval[string](b, "['set-font', 'set-theme', 'set-renderer'].map((id) => document.getElementById(id).value).join(',')"); got != "18,dark,dom" {
		t.Errorf("the settings panel after a reload shows %s, want 18,dark,dom", got)
	}
}

// grantClipboard lets the page at origin read and write the clipboard without a prompt.
func (b *browser) grantClipboard(origin string) {
	b.t.Helper()
	b.run(10*time.Second, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		for _, name := range []string{"clipboard-read", "clipboard-write"} {
			if _, err := cdp.Call(ctx, tg, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
				Permission: &cdpbrowser.PermissionDescriptor{Name: name, AllowWithoutSanitization: true},
				Setting:    cdpbrowser.PermissionSettingGranted, Origin: origin}); err != nil {
				return chromedp.Void{}, err
			}
		}
		return chromedp.Void{}, nil
	})
}

// waitClipboard waits until the clipboard holds want.
func (b *browser) waitClipboard(want string, d time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got := eval[string](b, "navigator.clipboard.readText().catch((e) => 'ERROR ' + e)")
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("the clipboard holds %q, want %q", got, want)
		}
		<-tick.C
	}
}

// setSetting sets one control of the settings panel and fires its change.
func (b *browser) setSetting(id string, value any) {
	b.t.Helper()
	prop := "value"
	if _, ok := value.(bool); ok {
		prop = "checked"
	}
	eval[any](b, fmt.Sprintf("(() => { const e = document.getElementById(%q); e.%s = %v; e.dispatchEvent(new Event('change')) })()", id, prop, jsLiteral(value)))
}

func jsLiteral(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v)
}

// odTab opens a tab and runs, at its shell, a program that prints pre, turns the terminal raw
// and logs every byte it reads (one hex byte per line, after READY).
func odTab(b *browser, pre string) int {
	b.t.Helper()
	eval[string](b, "window.muxterm.newTab()")
	b.waitJS("window.muxterm.tabs()[window.muxterm.activeIndex()].channel > 0", 10*time.Second)
	b.waitPrompt()
	i := eval[int](b, "window.muxterm.activeIndex()")
	b.typeText("stty raw -echo; printf '" + pre + "READY\\r\\n'; exec od -An -tx1 -v -w1\r")
	b.waitJS(fmt.Sprintf("window.muxterm.bufferText(%d).includes('\\nREADY')", i), 10*time.Second)
	return i
}

// TestBrowserClipboard: OSC 52 from a program (printf, and tmux's set-buffer -w) reaches the
// browser's clipboard; an OSC 52 query is not answered unless the settings allow it, then it
// is; a paste into a program that asked for bracketed paste comes bracketed, also after a
// reload; copy on select, once set, copies the selection.
func TestBrowserClipboard(t *testing.T) {
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	b.grantClipboard(g.Base)

	b.typeText("printf '\\033]52;c;%s\\007' $(printf 'h\\303\\251llo-osc52' | base64)\r")
	b.waitClipboard("héllo-osc52", 10*time.Second)

	if _, err := exec.LookPath("tmux"); err == nil {
		b.typeText("tmux -f /dev/null -L osc52-" + g.Token[:8] + " new-session 'tmux set -s set-clipboard on; tmux set -as terminal-features xterm-256color:clipboard; tmux set-buffer -w from-tmux; read x'\r")
		b.waitClipboard("from-tmux", 15*time.Second)
		b.typeText("\r") // read returns, the session ends, and tmux with it
		b.waitJS("/\\[exited\\]\\n[#$] *$/.test(window.muxterm.bufferText())", 10*time.Second)
	}

	eval[any](b, "navigator.clipboard.writeText('secret-clip')")
	i := odTab(b, `\033]52;c;?\007`)
	b.typeText("z")
	b.waitJS(fmt.Sprintf("window.muxterm.bufferText(%d).includes(' 7a')", i), 10*time.Second)
	if got := odBytes(eval[string](b, fmt.Sprintf("window.muxterm.bufferText(%d)", i))); strings.Join(got, "") != " 7a" {
		t.Errorf("with reading the clipboard off the program read %q, want only z", got)
	}

	b.setSetting("set-clipboard-read", true)
	i = odTab(b, `\033]52;c;?\007`)
	want := " 1b 5d 35 32 3b 63 3b" // ESC ] 5 2 ; c ; then base64("secret-clip") and BEL
	for _, c := range "c2VjcmV0LWNsaXA=" {
		want += fmt.Sprintf(" %02x", c)
	}
	want += " 07"
	b.waitJS(fmt.Sprintf("window.muxterm.bufferText(%d).includes(' 07')", i), 10*time.Second)
	if got := odBytes(eval[string](b, fmt.Sprintf("window.muxterm.bufferText(%d)", i))); strings.Join(got, "") != want {
		t.Errorf("with reading the clipboard on the program read %q, want %q", strings.Join(got, ""), want)
	}

	// Bracketed paste, as the program asked, also once the page was reloaded.
	i = odTab(b, `\033[?2004h`)
	session := eval[[]tabInfo](b, "window.muxterm.tabs()")[i].Session
	b.reload()
	b.waitJS(fmt.Sprintf("window.muxterm !== undefined && window.muxterm.tabs().some((t) => t.session === %q && t.channel > 0)", session), 20*time.Second)
	i = tabIndex(b, session)
	eval[any](b, fmt.Sprintf("window.muxterm.activate(%d)", i))
	b.waitJS(fmt.Sprintf("window.muxterm.bufferText(%d).includes('\\nREADY')", i), 10*time.Second)
	eval[any](b, `(() => { const dt = new DataTransfer(); dt.setData('text/plain', 'pq'); document.querySelector('.pane.active textarea').dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true})) })()`)
	b.waitJS(fmt.Sprintf("/ 31\\s+7e\\s*$/.test(window.muxterm.bufferText(%d))", i), 10*time.Second)
	if got, w := strings.Join(odBytes(eval[string](b, fmt.Sprintf("window.muxterm.bufferText(%d)", i))), ""), " 1b 5b 32 30 30 7e 70 71 1b 5b 32 30 31 7e"; got != w {
		t.Errorf("the paste reached the program as %q, want it bracketed %q", got, w)
	}

	// Copy on select: drag over READY.
	b.setSetting("set-copy-select", true)
	type rect struct{ X, Y, W, H float64 }
	from := eval[rect](b, "(() => { const r = window.muxterm.cellRect('READY', 0); return {X: r.x, Y: r.y, W: r.w, H: r.h} })()")
	to := eval[rect](b, "(() => { const r = window.muxterm.cellRect('READY', 4); return {X: r.x, Y: r.y, W: r.w, H: r.h} })()")
	b.run(10*time.Second,
		chromedp.MouseEvent(input.DispatchMouseEventTypeMousePressed, from.X+1, from.Y+from.H/2, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, to.X+to.W-1, to.Y+to.H/2, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseReleased, to.X+to.W-1, to.Y+to.H/2, chromedp.ButtonLeft, chromedp.ClickCount(1)))
	b.waitClipboard("READY", 10*time.Second)
}

// cdpDo runs one CDP command on the page.
func cdpDo[P any](b *browser, cmd cdp.Command[P, cdp.Empty], p P) {
	b.t.Helper()
	b.run(10*time.Second, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, cmd, p)
		return chromedp.Void{}, err
	})
}

// tap touches the centre of the element that selector names, and lifts the finger.
func (b *browser) tap(selector string) {
	b.t.Helper()
	type pt struct{ X, Y float64 }
	p := eval[pt](b, fmt.Sprintf("(() => { const r = document.querySelector(%q).getBoundingClientRect(); return {X: r.x + r.width / 2, Y: r.y + r.height / 2} })()", selector))
	cdpDo(b, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: input.DispatchTouchEventTypeTouchStart, TouchPoints: []*input.TouchPoint{{X: p.X, Y: p.Y}}})
	cdpDo(b, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: input.DispatchTouchEventTypeTouchEnd, TouchPoints: []*input.TouchPoint{}})
}

// TestBrowserPhone: in Chromium's mobile emulation (touch, 390×844) the key bar shows; its
// keys, with sticky Ctrl and Alt for the next key (of the bar or of the keyboard), reach the
// program as a terminal types them; IME compositions type every character once; a finger
// dragged down the terminal scrolls back through the scrollback.
func TestBrowserPhone(t *testing.T) {
	g := startGateway(t)
	b := startBrowser(t, browserOpts{width: 390, height: 844})
	cdpDo(b, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: 390, Height: 844, DeviceScaleFactor: 3, Mobile: true})
	cdpDo(b, emulation.SetTouchEmulationEnabled, emulation.SetTouchEmulationEnabledParams{Enabled: true, MaxTouchPoints: 5})
	b.open(g.Base + "/auth?token=" + g.Token)
	b.waitJS("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1", 20*time.Second)
	b.waitPrompt()
	if !eval[bool](b, "(() => { const k = document.getElementById('keybar'); const r = k.getBoundingClientRect(); return !k.hidden && r.height > 0 && r.bottom <= innerHeight + 0.5 })()") {
		t.Fatal("no key bar on the screen of a touch device")
	}
	b.typeText("printf '\\033[1mmuxterm\\033[0m on a phone: Esc Tab Ctrl Alt, arrows, | ~ /\\n'; ls /\r")
	b.waitText("\nmuxterm on a phone", 10*time.Second)
	b.waitPrompt()
	png := b.shot()
	b.save("keybar", png)
	if os.Getenv("MUXTERM_README_SCREENSHOT") != "" {
		if err := os.WriteFile(filepath.Join("..", "frontend", "docs", "keybar.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	b.typeText("stty raw -echo; printf 'READY\\r\\n'; exec od -An -tx1 -v -w1\r")
	b.waitText("\nREADY", 10*time.Second)
	var want []string
	expect := func(hex ...string) {
		want = append(want, hex...)
		last := want[len(want)-1]
		b.waitJS(fmt.Sprintf("(window.muxterm.bufferText().match(/ [0-9a-f]{2}\\b/g) || []).length >= %d", len(want)), 10*time.Second)
		if got := odBytes(eval[string](b, "window.muxterm.bufferText()")); strings.Join(got, "") != " "+strings.Join(want, " ") {
			t.Fatalf("the program read %q, want %q (last %s)", strings.Join(got, ""), " "+strings.Join(want, " "), last)
		}
	}
	b.tap(`#keybar [data-key="esc"]`)
	expect("1b")
	b.tap(`#keybar [data-key="tab"]`)
	expect("09")
	b.tap(`#keybar [data-key="ctrl"]`)
	if eval[string](b, `document.querySelector('#keybar [data-key="ctrl"]').getAttribute('aria-pressed')`) != "true" {
		t.Errorf("Ctrl does not show armed")
	}
	b.typeText("c") // from the (soft) keyboard
	expect("03")
	b.typeText("c") // Ctrl was for one key
	expect("63")
	b.tap(`#keybar [data-key="alt"]`)
	b.typeText("x")
	expect("1b", "78")
	b.tap(`#keybar [data-key="ctrl"]`)
	b.tap(`#keybar [data-key="up"]`)
	expect("1b", "5b", "31", "3b", "35", "41")
	b.tap(`#keybar [data-key="left"]`)
	expect("1b", "5b", "44")
	b.tap(`#keybar [data-key="pipe"]`)
	b.tap(`#keybar [data-key="tilde"]`)
	b.tap(`#keybar [data-key="slash"]`)
	expect("7c", "7e", "2f")

	// IME: a composition (に, にほ) committed as にほん, then a word inserted as Android's
	// keyboards do; each character once.
	cdpDo(b, input.ImeSetComposition, input.ImeSetCompositionParams{Text: "に", SelectionStart: 1, SelectionEnd: 1})
	cdpDo(b, input.ImeSetComposition, input.ImeSetCompositionParams{Text: "にほ", SelectionStart: 2, SelectionEnd: 2})
	cdpDo(b, input.InsertText, input.InsertTextParams{Text: "にほん"})
	expect("e3", "81", "ab", "e3", "81", "bb", "e3", "82", "93")
	cdpDo(b, input.InsertText, input.InsertTextParams{Text: "ok"})
	expect("6f", "6b")

	// Touch scrolling, in a tab with a scrollback.
	eval[string](b, "window.muxterm.newTab()")
	b.waitJS("window.muxterm.activeIndex() === 1 && window.muxterm.tabs()[1].channel > 0", 10*time.Second)
	b.waitPrompt()
	b.typeText("seq 1 300\r")
	b.waitText("\n300\n", 10*time.Second)
	type scroll struct{ ViewportY, BaseY int }
	before := eval[scroll](b, "window.muxterm.scroll()")
	if before.BaseY == 0 || before.ViewportY != before.BaseY {
		t.Fatalf("before the drag: %+v, want a scrollback, shown at its bottom", before)
	}
	type pt struct{ X, Y float64 }
	c := eval[pt](b, "(() => { const r = document.querySelector('.pane.active').getBoundingClientRect(); return {X: r.x + r.width / 2, Y: r.y + 60} })()")
	cdpDo(b, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: input.DispatchTouchEventTypeTouchStart, TouchPoints: []*input.TouchPoint{{X: c.X, Y: c.Y}}})
	for dy := 40.0; dy <= 400; dy += 40 {
		cdpDo(b, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: input.DispatchTouchEventTypeTouchMove, TouchPoints: []*input.TouchPoint{{X: c.X, Y: c.Y + dy}}})
	}
	cdpDo(b, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: input.DispatchTouchEventTypeTouchEnd, TouchPoints: []*input.TouchPoint{}})
	after := eval[scroll](b, "window.muxterm.scroll()")
	if after.ViewportY >= before.ViewportY-10 {
		t.Errorf("a 400 px drag down scrolled from row %d to %d, want at least 10 rows back", before.ViewportY, after.ViewportY)
	}
	t.Logf("FIGURE a 400 px drag scrolled %d rows back", before.ViewportY-after.ViewportY)
}

// TestBrowserSharePage: a read-only share link opened in a browser shows that one session (no
// other of the owner's, no +, no Detached, no close), its output live; what is typed there
// reaches nobody and the session keeps its size; a reload keeps the page; a revocation turns
// it into a notice that the link no longer works.
func TestBrowserSharePage(t *testing.T) {
	g := startGateway(t)
	ctx := ctxT(t, 60*time.Second)
	owner := g.dial(t)
	shared, err := owner.Open(ctx, client.OpenOptions{Cols: 100, Rows: 30, Name: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24}); err != nil {
		t.Fatal(err)
	}
	link, err := owner.ShareCreate(ctx, shared.Session(), time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	b := startBrowser(t, browserOpts{width: 1000, height: 640})
	b.open(g.Base + "/#share=" + link.Token)
	b.waitJS(fmt.Sprintf("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1 && window.muxterm.tabs()[0].session === %q && window.muxterm.tabs()[0].channel > 0", shared.Session()), 20*time.Second)
	if h := eval[string](b, "location.href"); strings.Contains(h, link.Token) {
		t.Errorf("the link's token stayed in the address bar: %s", h)
	}
	for _, sel := range []string{"#new-tab", "#detached-wrap", ".tab .close", ".tab .detach"} {
		if eval[string](b, fmt.Sprintf("getComputedStyle(document.querySelector(%q)).display", sel)) != "none" {
			t.Errorf("%s is shown on the share page", sel)
		}
	}
	typeUntil(ctx, t, shared, "printf '\\033[1mshared read-only\\033[0m: the owner types, viewers watch\\n'; ls /\r", "viewers watch")
	b.waitText("shared read-only: the owner types, viewers watch", 10*time.Second)
	b.waitPrompt()
	png := b.shot()
	b.save("share-page", png)
	if os.Getenv("MUXTERM_README_SCREENSHOT") != "" {
		if err := os.WriteFile(filepath.Join("..", "frontend", "docs", "share.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.typeText("echo typed-''by-viewer\r")
	if out := typeUntil(ctx, t, shared, "echo after-''typing\r", "after-typing"); strings.Contains(out, "typed-by-viewer") {
		t.Errorf("the read-only page's keys reached the shell: %q", out)
	}
	l, err := owner.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l {
		if s.Session == shared.Session() && (s.Cols != 100 || s.Rows != 30) {
			t.Errorf("the read-only page resized the session to %d×%d", s.Cols, s.Rows)
		}
	}

	b.reload()
	b.waitJS(fmt.Sprintf("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1 && window.muxterm.tabs()[0].session === %q && window.muxterm.tabs()[0].channel > 0", shared.Session()), 20*time.Second)

	if _, err := owner.ShareRevoke(ctx, link.Share); err != nil {
		t.Fatal(err)
	}
	b.waitJS("!document.getElementById('signin').hidden && document.getElementById('signin').innerText.includes('no longer works')", 10*time.Second)
	b.screenshot("share-revoked")

	// A read-write link's page types into the session.
	rw, err := owner.ShareCreate(ctx, shared.Session(), time.Hour, true)
	if err != nil {
		t.Fatal(err)
	}
	w := startBrowser(t, browserOpts{})
	w.open(g.Base + "/#share=" + rw.Token)
	w.waitJS(fmt.Sprintf("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1 && window.muxterm.tabs()[0].session === %q && window.muxterm.tabs()[0].channel > 0", shared.Session()), 20*time.Second)
	if got := eval[string](w, "document.getElementById('share-badge').textContent"); got != "shared · read-write" {
		t.Errorf("the read-write page's badge reads %q", got)
	}
	w.typeText("echo typed-''by-guest\r")
	if _, err := shared.ReadUntil(ctx, "\ntyped-by-guest"); err != nil {
		t.Fatalf("the read-write page's keys did not reach the shell: %v", err)
	}
}
