//go:build e2e

package e2e

// The recordings page in Chromium (frontend/src/recordings.ts): a recording made by the gateway
// is listed, played, sought to a marker and to the end; a broken one gets an error naming the
// line, not a hang.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/record"
	"github.com/muxterm/muxterm/internal/testutil"
)

// playerText is what the player's terminal shows (its DOM renderer's rows).
func playerText(b *browser) string {
	return eval[string](b, "document.querySelector('#pterm .xterm-rows').innerText")
}

// clickQuery clicks the element a CSS selector names (a DOM click, as b.click).
func clickQuery(b *browser, sel string) {
	b.t.Helper()
	eval[any](b, fmt.Sprintf("document.querySelector(%q).click()", sel))
}

func TestBrowserRecordingPlayerSeeksToMarkers(t *testing.T) {
	dir := t.TempDir()
	g := startGateway(t, "--record", dir, "--allow-cmd", "*")
	defer g.Stop(10 * time.Second)
	ctx := ctxT(t, 90*time.Second)
	c := g.dial(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Name: "marked",
		Cmd: []string{"/bin/sh", "-c", `stty -echo; printf 'BEFORE-MARK\n'; read x; printf 'AFTER-MARK\n'; read y`}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "BEFORE-MARK"); err != nil {
		t.Fatal(err)
	}
	// A second viewer comes and goes between the two lines: its markers split them.
	v, _, err := g.dial(t).Attach(ctx, ch.Session(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	typeUntil(ctx, t, ch, "\n", "AFTER-MARK")
	if _, err := ch.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the recording's exit marker", func() bool {
		_, _, evs := exportCast(ctx, t, c, ch.Session())
		return slices.Contains(castMarks(evs), "m:exit 0")
	})

	// A broken recording of the same principal's, as a corrupted disk could leave one.
	broken := strings.Repeat("e", 32)
	hdr := fmt.Sprintf(`{"version":2,"width":80,"height":24,"timestamp":%d,"muxterm":{"session":%q,"owner":"default"}}`, time.Now().Unix(), broken)
	if err := os.WriteFile(filepath.Join(dir, broken+record.Ext), []byte(hdr+"\n[0.1, \"o\", \"ok\"]\n[0.2, \"o\", \"trunc"), 0o600); err != nil {
		t.Fatal(err)
	}

	b := startBrowser(t, browserOpts{})
	defer b.screenshot("recording-player")
	b.open(g.Base + "/auth?token=" + g.Token) // signs in (the cookie), then the terminals page
	b.open(g.Base + "/recordings.html?recording=" + ch.Session())
	b.waitJS("window.muxtermPlayer !== undefined && window.muxtermPlayer.duration > 0", 20*time.Second)
	if n := eval[int](b, "document.querySelectorAll('#rlist tbody tr').length"); n != 2 {
		t.Fatalf("the list shows %d recordings, want 2", n)
	}
	labels := eval[[]string](b, "[...document.querySelectorAll('#pmarkers button.marker')].map(b => b.dataset.label)")
	if len(labels) < 4 || labels[1] != "attach" || labels[2] != "detach" || labels[len(labels)-1] != "exit 0" {
		t.Fatalf("markers %v, want attach, attach, detach, …, exit 0", labels)
	}
	// Seek to the second viewer's attach: the first line is on screen, the second is not yet.
	clickQuery(b, `#pmarkers li:nth-child(2) button`)
	b.waitJS("document.querySelector('#pterm .xterm-rows').innerText.includes('BEFORE-MARK')", 10*time.Second)
	if got := playerText(b); strings.Contains(got, "AFTER-MARK") {
		t.Fatalf("at the attach marker the screen already shows the later line:\n%s", got)
	}
	// Play from there at 4×: the second line comes, and the player stops at the end.
	eval[any](b, `(() => { const s = document.querySelector('#pspeed'); s.value = '4'; s.dispatchEvent(new Event('change')); })()`)
	b.click("pplay")
	b.waitJS("document.querySelector('#pterm .xterm-rows').innerText.includes('AFTER-MARK') && !window.muxtermPlayer.playing", 20*time.Second)
	// Back to the start with the timeline: neither line.
	eval[any](b, `(() => { const r = document.querySelector('#ptimeline'); r.value = '0'; r.dispatchEvent(new Event('input')); })()`)
	b.waitJS("!document.querySelector('#pterm .xterm-rows').innerText.includes('BEFORE-MARK')", 10*time.Second)

	// The broken recording: a clear error naming its line, and the page still answers.
	clickQuery(b, fmt.Sprintf(`#rlist tr[data-recording=%q] button`, broken))
	b.waitJS("!document.querySelector('#rerror').hidden", 10*time.Second)
	if msg := eval[string](b, "document.querySelector('#rerror').textContent"); !strings.Contains(msg, "line 3") {
		t.Fatalf("error %q, want one naming line 3", msg)
	}
}

// recordings.html?recording=ID&t=SECONDS (a span's muxterm.recording.offset_s) opens at that
// moment: the kill span's offset shows the screen as it was when the kill ended.
func TestBrowserRecordingOpensAtASpansOffset(t *testing.T) {
	dir := t.TempDir()
	g := startGateway(t, "--record", dir, "--allow-cmd", "*")
	defer g.Stop(10 * time.Second)
	ctx := ctxT(t, 60*time.Second)
	c := g.dial(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"/bin/sh", "-c", `stty -echo; printf 'FIRST\n'; read x; printf 'SECOND\n'; read y`}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "FIRST"); err != nil {
		t.Fatal(err)
	}
	// The moment between the lines, on the recording's clock: the second viewer's attach marker.
	v, _, err := g.dial(t).Attach(ctx, ch.Session(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	typeUntil(ctx, t, ch, "\n", "SECOND")
	var at float64
	testutil.WaitFor(t, 10*time.Second, "the detach marker in the recording", func() bool {
		_, _, evs := exportCast(ctx, t, c, ch.Session())
		for _, e := range evs {
			if e.Code == "m" && e.Data == "detach" {
				at = e.At
				return true
			}
		}
		return false
	})
	b := startBrowser(t, browserOpts{})
	b.open(g.Base + "/auth?token=" + g.Token)
	b.open(fmt.Sprintf("%s/recordings.html?recording=%s&t=%f", g.Base, ch.Session(), at))
	b.waitJS("window.muxtermPlayer !== undefined && window.muxtermPlayer.duration > 0 && document.querySelector('#pterm .xterm-rows').innerText.includes('FIRST')", 20*time.Second)
	if got := playerText(b); strings.Contains(got, "SECOND") {
		t.Fatalf("at t=%f the screen shows the later line:\n%s", at, got)
	}
}
