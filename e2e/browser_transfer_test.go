//go:build e2e

package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/muxterm/muxterm/client"
)

// lrzszPaths returns sz and rz from Debian's lrzsz, or skips t (fails it under MUXTERM_BROWSER
// or in CI): `make deps-browser` installs them.
func lrzszPaths(t *testing.T) (sz, rz string) {
	t.Helper()
	return browserTool(t, "sz (lrzsz)", "/usr/bin/sz", "sz"), browserTool(t, "rz (lrzsz)", "/usr/bin/rz", "rz")
}

type transferState struct {
	Enabled bool `json:"enabled"`
	Busy    bool `json:"busy"`
	Shown   bool `json:"shown"`
	Last    *struct {
		Direction string  `json:"direction"`
		Name      string  `json:"name"`
		Bytes     int64   `json:"bytes"`
		Ms        float64 `json:"ms"`
	} `json:"last"`
}

// transferFiles writes the test's files into dir: 0 B, 1 B and 10 MiB of random bytes.
func transferFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	big := make([]byte, 10<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"empty.bin": {}, "one.bin": {0x18}, "big.bin": big}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// waitFile waits until path holds exactly want (a download or rz writes it in pieces).
func waitFile(t *testing.T, path string, want []byte, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := os.ReadFile(path)
		if err == nil && bytes.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: got %d bytes (err %v), want the %d bytes sent", path, len(got), err, len(want))
		}
		<-tick.C
	}
}

// lastTransfer waits for the active tab's transfer to end with one of name, and returns it.
func lastTransfer(b *browser, direction, name string, d time.Duration) transferState {
	b.t.Helper()
	b.waitJS(fmt.Sprintf("(() => { const x = window.muxterm.transfer(); return !x.busy && x.last !== null && x.last.direction === %q && x.last.name === %q })()", direction, name), d)
	return eval[transferState](b, "window.muxterm.transfer()")
}

// TestBrowserFileTransfer: `sz FILE` (Debian's lrzsz) in a session downloads the file in
// Chromium, and a file given to the Upload button's input reaches the `rz` waiting for it, for
// files of 0 B, 1 B and 10 MiB of random bytes, byte for byte; the terminal shows none of
// ZMODEM's frames, the shell works after each transfer and after a cancelled one; a reload's
// replay of those transfers starts none.
func TestBrowserFileTransfer(t *testing.T) {
	lrzszPaths(t)
	src, dl, up := t.TempDir(), t.TempDir(), t.TempDir()
	files := transferFiles(t, src)
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	defer b.screenshot("file-transfer")
	cdpDo(b, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dl})
	if x := eval[transferState](b, "window.muxterm.transfer()"); !x.Enabled || x.Shown {
		t.Fatalf("transfer state on a writing page: %+v, want enabled and no bar", x)
	}

	b.typeText("cd " + src + "\r")
	for i, name := range []string{"empty.bin", "one.bin", "big.bin"} {
		b.typeText("sz " + name + "\r")
		x := lastTransfer(b, "download", name, 60*time.Second)
		waitFile(t, filepath.Join(dl, name), files[name], 30*time.Second)
		if name == "big.bin" {
			t.Logf("download of %d bytes: %.0f ms, %.2f MiB/s", x.Last.Bytes, x.Last.Ms, float64(x.Last.Bytes)/(1<<20)/(x.Last.Ms/1000))
		}
		b.echo(fmt.Sprintf("after''download%d", i))
	}

	b.typeText("cd " + up + "\r")
	for i, name := range []string{"empty.bin", "one.bin", "big.bin"} {
		b.typeText("rz\r")
		b.waitJS("window.muxterm.transfer().shown && window.muxterm.transfer().busy", 15*time.Second)
		b.run(10*time.Second, chromedp.SetUploadFiles(chromedp.CSS(".pane.active .transfer input[type=file]"), []string{filepath.Join(src, name)}))
		x := lastTransfer(b, "upload", name, 90*time.Second)
		if name == "big.bin" {
			t.Logf("upload of %d bytes: %.0f ms, %.2f MiB/s", x.Last.Bytes, x.Last.Ms, float64(x.Last.Bytes)/(1<<20)/(x.Last.Ms/1000))
		}
		b.echo(fmt.Sprintf("after''upload%d", i))
		waitFile(t, filepath.Join(up, name), files[name], 10*time.Second)
	}
	if strings.Contains(g.Logs(), "inputQueue") || strings.Contains(g.Logs(), "inputRate") {
		t.Errorf("the gateway refused input during the uploads:\n%s", g.Logs())
	}

	// Cancel: rz waits, the Cancel button aborts it, and the shell answers again.
	b.typeText("rz\r")
	b.waitJS("window.muxterm.transfer().shown", 15*time.Second)
	eval[any](b, "document.querySelector('.pane.active .transfer .cancel').click()")
	b.waitJS("!window.muxterm.transfer().busy && !window.muxterm.transfer().shown", 5*time.Second)
	// rz has gone once the shell's prompt follows the notice (keys typed before reach rz).
	b.waitJS(`/\[muxterm: cancelled\]\n# *$/.test(window.muxterm.bufferText())`, 10*time.Second)
	b.echo("after''cancel")
	// Ctrl-C does the same.
	b.typeText("rz\r")
	b.waitJS("window.muxterm.transfer().shown", 15*time.Second)
	b.typeText("\x03")
	b.waitJS("!window.muxterm.transfer().busy && !window.muxterm.transfer().shown", 5*time.Second)
	b.waitJS(`/\[muxterm: cancelled\]\n# *$/.test(window.muxterm.bufferText())`, 10*time.Second)
	b.echo("after''ctrlc")

	text := eval[string](b, "window.muxterm.bufferText()")
	for _, frame := range []string{"**\x18B", "B0100", "B00000"} {
		if strings.Contains(text, frame) {
			t.Errorf("the terminal shows ZMODEM's %q:\n%s", frame, text)
		}
	}

	// A reload replays every transfer's bytes: none starts again.
	entries, _ := os.ReadDir(dl)
	b.reload()
	b.waitJS("window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1 && window.muxterm.bufferText().includes('aftercancel')", 20*time.Second)
	b.echo("after''reload")
	if x := eval[transferState](b, "window.muxterm.transfer()"); x.Busy || x.Shown || x.Last != nil {
		t.Errorf("the replay started a transfer: %+v", x)
	}
	if again, _ := os.ReadDir(dl); len(again) != len(entries) {
		t.Errorf("the replay downloaded again: %d files in the download directory, %d before", len(again), len(entries))
	}
}

// TestBrowserFileTransferOffWhenReadOnly: a read-only share link's page never answers sz (a
// transfer writes to the program): it shows sz's frames as output, sends nothing, downloads
// nothing, and sz hears nothing from it.
func TestBrowserFileTransferOffWhenReadOnly(t *testing.T) {
	lrzszPaths(t)
	src, dl := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "one.bin"), []byte{1}, 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t)
	ctx := ctxT(t, 60*time.Second)
	owner := g.dial(t)
	shared, err := owner.Open(ctx, client.OpenOptions{Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	link, err := owner.ShareCreate(ctx, shared.Session(), time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	b := startBrowser(t, browserOpts{width: 1000, height: 640})
	defer b.screenshot("file-transfer-read-only")
	cdpDo(b, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dl})
	b.open(g.Base + "/#share=" + link.Token)
	b.waitJS("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1 && window.muxterm.tabs()[0].channel > 0", 20*time.Second)
	if x := eval[transferState](b, "window.muxterm.transfer()"); x.Enabled {
		t.Fatalf("a read-only page has file transfer on: %+v", x)
	}

	if _, err := shared.Write([]byte("cd " + src + " && sz one.bin\r")); err != nil {
		t.Fatal(err)
	}
	const zrqinit = "B00000000000000" // sz's ZRQINIT, a hex header
	if _, err := shared.ReadUntil(ctx, zrqinit); err != nil {
		t.Fatal(err)
	}
	b.waitText(zrqinit, 10*time.Second)
	// CANs end sz; had the page answered with ZRINIT, sz would have offered the file (ZFILE).
	if _, err := shared.Write([]byte("\x18\x18\x18\x18\x18\x18\x18\x18\x18\x18")); err != nil {
		t.Fatal(err)
	}
	// sz flushes its input as it exits: type once the shell's prompt is back.
	if _, err := shared.ReadUntil(ctx, "# "); err != nil {
		t.Fatal(err)
	}
	if _, err := shared.Write([]byte("echo read''only\r")); err != nil {
		t.Fatal(err)
	}
	out, err := shared.ReadUntil(ctx, "\nreadonly")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "*\x18C\x04") {
		t.Errorf("sz offered the file: someone answered it:\n%q", out)
	}
	b.waitText("readonly", 10*time.Second)
	if x := eval[transferState](b, "window.muxterm.transfer()"); x.Enabled || x.Busy || x.Shown || x.Last != nil {
		t.Errorf("transfer state on the read-only page: %+v", x)
	}
	if entries, _ := os.ReadDir(dl); len(entries) != 0 {
		t.Errorf("the read-only page downloaded %d files", len(entries))
	}
}

// TestBrowserFileTransferRefusedInputAborts: another viewer typing into the session while a
// file goes to rz takes the input rate the upload paced itself under (and puts bytes into
// ZMODEM's stream): the upload stops with a line that says why, rz is cancelled, and the shell
// answers again; rz never reports a whole file.
func TestBrowserFileTransferRefusedInputAborts(t *testing.T) {
	lrzszPaths(t)
	src, up := t.TempDir(), t.TempDir()
	data := make([]byte, 2<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "two.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "--max-input-rate", "128KiB", "--max-input-burst", "64KiB")
	b := newBrowser(t, g.Base, g.Token, false)
	defer b.screenshot("file-transfer-refused")
	defer func() {
		if t.Failed() {
			t.Logf("transfer bar: %q\nterminal:\n%s", eval[string](b, "document.querySelector('.pane.active .transfer .what').textContent"), eval[string](b, "window.muxterm.bufferText()"))
		}
	}()
	b.typeText("cd " + up + "\r")
	b.typeText("rz\r")
	b.waitJS("window.muxterm.transfer().shown && window.muxterm.transfer().busy", 15*time.Second)
	b.run(10*time.Second, chromedp.SetUploadFiles(chromedp.CSS(".pane.active .transfer input[type=file]"), []string{filepath.Join(src, "two.bin")}))
	b.waitJS(`/two\.bin: [1-9][0-9]* of/.test(document.querySelector('.pane.active .transfer .what').textContent)`, 15*time.Second)

	ctx := ctxT(t, 60*time.Second)
	other := g.dial(t)
	ch, _, err := other.Attach(ctx, eval[string](b, "window.muxterm.tabs()[0].session"), nil)
	if err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte("x"), 8<<10)
	for i := 0; i < 16 && eval[bool](b, "window.muxterm.transfer().busy"); i++ {
		_, _ = ch.Write(junk) // refusals of these are the other viewer's business
	}
	b.waitJS("!window.muxterm.transfer().busy", 30*time.Second)
	text := eval[string](b, "window.muxterm.bufferText()")
	if !strings.Contains(text, "[muxterm: upload refused by the gateway (inputRate); transfer aborted]") && !strings.Contains(text, "[muxterm: upload failed: rz asked to resend") {
		t.Fatalf("no line says why the upload stopped:\n%s", text)
	}
	if strings.Contains(text, "uploaded two.bin") {
		t.Errorf("the page reports the upload done:\n%s", text)
	}
	// rz is gone once the shell's prompt is back; the shell works.
	b.waitJS(`/\n# *$/.test(window.muxterm.bufferText())`, 40*time.Second)
	b.echo("after''refusal")
	if text := eval[string](b, "window.muxterm.bufferText()"); strings.Contains(text, "**B0") {
		t.Errorf("the terminal shows the cancelled rz's ZMODEM headers:\n%s", text)
	}
	if got, err := os.ReadFile(filepath.Join(up, "two.bin")); err == nil && bytes.Equal(got, data) {
		t.Errorf("rz wrote the whole file although the upload was aborted")
	}
}

// TestBrowserFileTransferDrop: a file dropped on the terminal (CDP's drag events, as a file
// dragged from the desktop) goes to the rz waiting for it; one dropped with no rz waiting is
// refused with a message and nothing is typed.
func TestBrowserFileTransferDrop(t *testing.T) {
	lrzszPaths(t)
	src, up := t.TempDir(), t.TempDir()
	data := make([]byte, 100<<10)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(src, "dropped.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	defer b.screenshot("file-transfer-drop")
	type pt struct{ X, Y float64 }
	at := eval[pt](b, "(() => { const r = document.querySelector('.pane.active').getBoundingClientRect(); return {X: r.x + r.width / 2, Y: r.y + r.height / 2} })()")
	drop := func() {
		d := &input.DragData{Items: []*input.DragDataItem{}, Files: []string{path}, DragOperationsMask: 1}
		for _, typ := range []input.DispatchDragEventType{input.DispatchDragEventTypeDragEnter, input.DispatchDragEventTypeDragOver, input.DispatchDragEventTypeDrop} {
			cdpDo(b, input.DispatchDragEvent, input.DispatchDragEventParams{Type: typ, X: at.X, Y: at.Y, Data: d})
		}
	}

	b.typeText("cd " + up + "\r")
	b.waitJS(`/\n# *$/.test(window.muxterm.bufferText())`, 10*time.Second)
	drop() // no rz waiting
	b.waitJS("document.getElementById('toast').textContent.includes('No rz is waiting')", 5*time.Second)
	b.echo("no''rz")

	b.typeText("rz\r")
	b.waitJS("window.muxterm.transfer().shown && window.muxterm.transfer().busy", 15*time.Second)
	drop()
	lastTransfer(b, "upload", "dropped.bin", 30*time.Second)
	b.echo("after''drop")
	waitFile(t, filepath.Join(up, "dropped.bin"), data, 10*time.Second)
}

// TestBrowserFileTransferReconnectAborts: the socket dropping while rz waits for a file ends the
// transfer with a line that says so (the stream in between is not the page's to parse), rz is
// cancelled once the page is back, and the shell answers.
func TestBrowserFileTransferReconnectAborts(t *testing.T) {
	lrzszPaths(t)
	g, p := startBehindProxy(t)
	b := newBrowser(t, p.base(), g.Token, false)
	defer b.screenshot("file-transfer-reconnect")
	b.typeText("cd " + t.TempDir() + "\r")
	b.waitJS(`/\n# *$/.test(window.muxterm.bufferText())`, 10*time.Second)
	b.typeText("rz\r")
	b.waitJS("window.muxterm.transfer().shown && window.muxterm.transfer().busy", 15*time.Second)
	p.cut()
	b.waitJS("window.muxterm.state() !== 'connected'", 10*time.Second)
	b.waitJS("window.muxterm.state() === 'connected'", 20*time.Second)
	b.waitJS("!window.muxterm.transfer().busy && !window.muxterm.transfer().shown", 10*time.Second)
	b.waitText("[muxterm: the connection dropped; transfer aborted]", 5*time.Second)
	b.waitJS(`/\n# *$/.test(window.muxterm.bufferText())`, 15*time.Second)
	b.echo("after''reconnect")
}
