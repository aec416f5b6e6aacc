//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
)

// TestBrowserScrollbarFollowsOutput: output that grows a fresh terminal's scrollback, whose
// scrollbar follows it once per frame (frontend/src/viewport.ts), leaves the slider at the
// bottom of its track; a mouse wheel over the terminal scrolls back through the scrollback, and
// the slider goes up with it; a scroll right after output, before the frame that syncs the
// scrollbar, goes where it is asked to, up or to the bottom.
func TestBrowserScrollbarFollowsOutput(t *testing.T) {
	g := startGateway(t)
	for _, webgl := range []bool{false, true} {
		b := newBrowser(t, g.Base, g.Token, webgl)
		b.waitPrompt()
		type bar struct {
			Top, Bottom, Track float64
			Lightened          bool
		}
		type scroll struct{ ViewportY, BaseY int }
		b.typeText("seq 1 300\r")
		b.waitText("\n300\n", 20*time.Second)
		b.waitJS("(() => { const s = window.muxterm.scrollbar(); return s && s.top > 0 && Math.abs(s.bottom - s.track) <= 1 })()", 10*time.Second)
		s := eval[bar](b, "window.muxterm.scrollbar()")
		if !s.Lightened {
			t.Errorf("webgl %v: the scrollbar is synced on every line (viewport.ts found no xterm.js internals it knows)", webgl)
		}
		at := eval[scroll](b, "window.muxterm.scroll()")
		if at.BaseY < 250 || at.ViewportY != at.BaseY {
			t.Fatalf("webgl %v: after the output: %+v, want a scrollback of 250 rows or more, shown at its bottom", webgl, at)
		}
		type pt struct{ X, Y float64 }
		c := eval[pt](b, "(() => { const r = document.querySelector('.pane.active').getBoundingClientRect(); return {X: r.x + r.width / 2, Y: r.y + r.height / 2} })()")
		for range 20 { // 20 notches up; a zero deltaX would be left out, and CDP wants it
			cdpDo(b, input.DispatchMouseEvent, input.DispatchMouseEventParams{Type: input.DispatchMouseEventTypeMouseWheel, X: c.X, Y: c.Y, DeltaX: 0.001, DeltaY: -120})
		}
		b.waitJS("(() => { const v = window.muxterm.scroll(); const s = window.muxterm.scrollbar(); return v.viewportY < v.baseY - 20 && s.bottom < s.track - 20 })()", 10*time.Second)
		back := eval[scroll](b, "window.muxterm.scroll()")

		// A scroll right after output, before the frame that syncs the scrollbar, goes where it
		// is asked to: the scrollbar is synced first.
		b.echo("to-''the-bottom") // a key takes the view back to the bottom
		if v := eval[scroll](b, "window.muxterm.scrollAfterLines(50, -5)"); v.ViewportY != v.BaseY-5 {
			t.Errorf("webgl %v: scrolled 5 rows up right after 50 lines of output: row %d, the bottom %d", webgl, v.ViewportY, v.BaseY)
		}

		// Scrolled back, a scroll to the bottom right after output reaches the bottom.
		up := eval[scroll](b, "window.muxterm.scroll()")
		if v := eval[scroll](b, "window.muxterm.scrollAfterLines(0, -20)"); v.ViewportY != up.ViewportY-20 {
			t.Fatalf("webgl %v: 20 more rows up from row %d: row %d", webgl, up.ViewportY, v.ViewportY)
		}
		if v := eval[scroll](b, "window.muxterm.scrollAfterLines(50, 'bottom')"); v.ViewportY != v.BaseY {
			t.Errorf("webgl %v: to the bottom right after 50 lines of output, scrolled back: row %d, the bottom %d", webgl, v.ViewportY, v.BaseY)
		}
		t.Logf("FIGURE webgl %v: slider %.0f–%.0f of a %.0f px track at the bottom; the wheel scrolled back %d rows", webgl, s.Top, s.Bottom, s.Track, at.ViewportY-back.ViewportY)
	}
}
