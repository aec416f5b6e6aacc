//go:build e2e

package e2e

// Recordings (--record, docs/protocol.md recording.list and recording.read): a session of the
// built binary is recorded in asciicast v2, read back over the wire, and played by Debian's
// asciinema; input is in it only with --record-input; it continues in the same file across an
// upgrade in place; retention removes what is too old (by size: recording_retention_test.go); a
// full disk drops from the recording, never from the session, and the metric counts the drops.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/record"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/proto"
)

// exportCast reads recording id over the wire and parses it strictly.
func exportCast(ctx context.Context, t *testing.T, c *client.Client, id string) ([]byte, record.Header, []record.Event) {
	t.Helper()
	var buf bytes.Buffer
	if _, err := c.ExportRecording(ctx, id, &buf); err != nil {
		t.Fatal(err)
	}
	p, err := record.NewParser(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var evs []record.Event
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), p.Header, evs
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
}

// castOutput concatenates the output events; castMarks lists the other events as code:data.
func castOutput(evs []record.Event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Code == "o" {
			b.WriteString(e.Data)
		}
	}
	return b.String()
}

func castMarks(evs []record.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Code != "o" {
			out = append(out, e.Code+":"+e.Data)
		}
	}
	return out
}

// A recorded session, read back through recording.read, is played by asciinema exactly as its
// client received it, with its size change and the markers of a second viewer and of the exit;
// the file is mode 0600; another principal neither lists nor reads it.
func TestRecordingPlaysBackExactly(t *testing.T) {
	alice, bob, _, file := threePrincipals(t)
	dir := t.TempDir()
	g := launchGateway(t, alice, []string{"MUXTERM_TOKENS=" + file}, "--record", dir, "--allow-cmd", "*")
	defer g.Stop(10 * time.Second)
	ctx := ctxT(t, 60*time.Second)
	c := dialAs(t, g, alice)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Name: "rec",
		Cmd: []string{"/bin/sh", "-c", `stty -echo; printf 'héllo 世界\n'; read x; printf 'got %s\n' "$x"; read y; exit 0`}})
	if err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	out, err := ch.ReadUntil(ctx, "世界")
	if err != nil {
		t.Fatal(err)
	}
	seen.WriteString(out)
	if err := ch.Resize(ctx, 100, 30); err != nil {
		t.Fatal(err)
	}
	second := dialAs(t, g, alice)
	v, _, err := second.Attach(ctx, ch.Session(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	seen.WriteString(typeUntil(ctx, t, ch, "one\n", "got one"))
	if _, err := ch.Write([]byte("two\n")); err != nil {
		t.Fatal(err)
	}
	select { // the session's end: session.closed comes only at the reaper's sweep
	case <-ch.Exited():
	case <-ctx.Done():
		t.Fatal("the program did not exit")
	}
	for n := ch.Buffered(); n > 0; n = ch.Buffered() {
		buf := make([]byte, n)
		k, _ := ch.Read(buf)
		seen.Write(buf[:k])
	}

	list, err := c.Recordings(ctx, "")
	if err != nil || len(list) != 1 || list[0].Recording != ch.Session() || list[0].Name != "rec" || list[0].Cols != 80 {
		t.Fatalf("recording.list: %+v, %v; want the one recording of %s", list, err, ch.Session())
	}
	if st, err := os.Stat(filepath.Join(dir, ch.Session()+".cast")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("recording file: %v, %v; want mode 0600", st, err)
	}
	// The recording ends once the program's exit and output have ended: its exit marker is
	// written by the gateway's recorder, which nothing outside signals.
	var raw []byte
	var evs []record.Event
	testutil.WaitFor(t, 10*time.Second, "the recording's exit marker", func() bool {
		raw, _, evs = exportCast(ctx, t, c, ch.Session())
		return slices.Contains(castMarks(evs), "m:exit 0")
	})
	if got := castOutput(evs); got != seen.String() {
		t.Fatalf("recorded output %q, want what the client read %q", got, seen.String())
	}
	// The opener's attach, the resize, the second viewer's attach and detach, in order.
	want := []string{"m:attach", "r:100x30", "m:attach", "m:detach"}
	if marks := castMarks(evs); len(marks) < 4 || !slices.Equal(marks[:4], want) {
		t.Fatalf("events %v, want them to start %v", marks, want)
	}
	local := filepath.Join(t.TempDir(), "export.cast")
	if err := os.WriteFile(local, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := testutil.AsciinemaCat(t, local); got != seen.String() {
		t.Fatalf("asciinema cat: %q, want %q", got, seen.String())
	}

	// Bob neither lists nor reads alice's recording: to him it does not exist.
	cb := dialAs(t, g, bob)
	if l, err := cb.Recordings(ctx, ""); err != nil || len(l) != 0 {
		t.Fatalf("bob's recording.list: %+v, %v; want none", l, err)
	}
	_, err = cb.ReadRecording(ctx, ch.Session(), 0, 100)
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Kind() != proto.KindUnknownSession {
		t.Fatalf("bob's recording.read of alice's: %v, want unknown_session", err)
	}
}

// With --record-input the recording holds what a client typed as "i" events, byte for byte,
// a character split across two frames included; without it no "i" event exists, and typed text
// reaches the recording only as the terminal's echo: a line typed with echo off (a password at
// a prompt) is nowhere in the file.
func TestRecordingInput(t *testing.T) {
	// Each line is typed in pieces, as keystrokes arrive: the echoed one splits its ö, the hidden
	// one its 界 (e7 95 8c), between frames.
	echoed := []string{"seen w\xc3", "\xb6rd\r"}
	hidden := []string{"p4ss \x1b[A 世", "\xe7\x95", "\x8c\t\"q\\\r"}
	for _, tc := range []struct {
		name  string
		input bool
	}{{"with --record-input", true}, {"without", false}} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--record", t.TempDir(), "--allow-cmd", "*"}
			if tc.input {
				args = append(args, "--record-input")
			}
			g := startGateway(t, args...)
			defer g.Stop(10 * time.Second)
			ctx := ctxT(t, 30*time.Second)
			c := g.dial(t)
			ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"/bin/sh", "-c",
				`printf READY; IFS= read -r a; stty -echo; printf QUIET; IFS= read -r b; printf DONE; exit 0`}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ch.ReadUntil(ctx, "READY"); err != nil {
				t.Fatal(err)
			}
			typeLine := func(pieces []string, until string) {
				for _, p := range pieces {
					if _, err := ch.Write([]byte(p)); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := ch.ReadUntil(ctx, until); err != nil {
					t.Fatalf("read until %q: %v", until, err)
				}
			}
			typeLine(echoed, "QUIET") // the echo comes before QUIET: the terminal echoes no more
			typeLine(hidden, "DONE")
			// Input is recorded before the program may read it, so the exit marker follows it.
			var raw []byte
			var evs []record.Event
			testutil.WaitFor(t, 10*time.Second, "the recording's exit marker", func() bool {
				raw, _, evs = exportCast(ctx, t, c, ch.Session())
				return slices.Contains(castMarks(evs), "m:exit 0")
			})
			var in strings.Builder
			inputs := 0
			for _, e := range evs {
				if e.Code == "i" {
					in.WriteString(e.Data)
					inputs++
				}
			}
			out := castOutput(evs)
			if !strings.Contains(out, "seen wörd") || strings.Contains(out, "p4ss") {
				t.Fatalf("recorded output %q: want the echo of the first line and nothing of the second", out)
			}
			if tc.input {
				if want := strings.Join(echoed, "") + strings.Join(hidden, ""); in.String() != want {
					t.Fatalf("recorded input %q, want what was typed %q", in.String(), want)
				}
				return
			}
			if inputs != 0 || bytes.Contains(raw, []byte("p4ss")) {
				t.Fatalf("%d input events (%q), the unechoed line in the file: %v; want neither without --record-input",
					inputs, in.String(), bytes.Contains(raw, []byte("p4ss")))
			}
		})
	}
}

// Only sessions that ask are recorded with --record-on-request, and a gateway without --record
// refuses the ask, naming the flag.
func TestRecordingOnRequest(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	plain := startGateway(t)
	defer plain.Stop(10 * time.Second)
	_, err := plain.dial(t).Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Record: true})
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Kind() != proto.KindInvalidParams || !strings.Contains(pe.Message, "--record") {
		t.Fatalf("open with record on a gateway without --record: %v, want invalid_params naming --record", err)
	}

	g := startGateway(t, "--record", t.TempDir(), "--record-on-request")
	defer g.Stop(10 * time.Second)
	c := g.dial(t)
	if _, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24}); err != nil {
		t.Fatal(err)
	}
	asked, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Record: true})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Recordings(ctx, "")
	if err != nil || len(list) != 1 || list[0].Recording != asked.Session() || !list[0].Active {
		t.Fatalf("recordings %+v, %v; want only the session that asked, active", list, err)
	}
}

// An upgrade in place continues a recording in the same file: one header, the marker of the
// upgrade, the output before and after it.
func TestRecordingAcrossUpgrade(t *testing.T) {
	dir := t.TempDir()
	g := startGateway(t, "--record", dir, "--allow-cmd", "*")
	defer g.Stop(10 * time.Second)
	ctx := ctxT(t, 90*time.Second)
	c := g.dial(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"/bin/sh", "-c", `stty -echo; while read x; do printf 'said %s\n' "$x"; done`}})
	if err != nil {
		t.Fatal(err)
	}
	typeUntil(ctx, t, ch, "before\n", "said before")
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "upgrade complete", 1, 60*time.Second)
	c2 := g.dial(t)
	ch2, _, err := c2.Attach(ctx, ch.Session(), nil)
	if err != nil {
		t.Fatal(err)
	}
	typeUntil(ctx, t, ch2, "after\n", "said after")
	_, _, evs := exportCast(ctx, t, c2, ch.Session())
	out := castOutput(evs)
	if !strings.Contains(out, "said before") || !strings.Contains(out, "said after") {
		t.Fatalf("recorded output %q lacks the output before or after the upgrade", out)
	}
	marks := castMarks(evs)
	if !slices.Contains(marks, "m:upgrade in place") || strings.Index(out, "said before") > strings.Index(out, "said after") {
		t.Fatalf("events %v: no upgrade marker, or out of order", marks)
	}
}

// Retention at start: a recording older than --record-max-age goes, a newer one and a file that
// is no recording stay.
func TestRecordingRetentionAtStart(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, strings.Repeat("a", 32)+".cast")
	young := filepath.Join(dir, strings.Repeat("b", 32)+".cast")
	other := filepath.Join(dir, "notes.txt")
	for _, p := range []string{old, young, other} {
		if err := os.WriteFile(p, []byte(`{"version":2,"width":80,"height":24}`+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-48 * time.Hour)
	for _, p := range []string{old, other} {
		if err := os.Chtimes(p, long, long); err != nil {
			t.Fatal(err)
		}
	}
	g := startGateway(t, "--record", dir, "--record-max-age", "24h")
	defer g.Stop(10 * time.Second)
	g.waitLog(t, "recordings: removed by retention", 1, 10*time.Second)
	for p, want := range map[string]bool{old: false, young: true, other: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(p), err == nil, want)
		}
	}
}

// On a full disk the recording drops and says how much, and the session's client gets every
// byte. A 1 MiB tmpfs is filled up once the session's header is written; once space is free
// again the recording goes on, its markers accounting for every byte it lacks, and the metric
// muxterm.recording.dropped counts exactly those bytes.
func TestRecordingFullDiskNeverSlowsTheSession(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	g := startGateway(t, "--record", dir, "--allow-cmd", "*", "--metrics")
	defer g.Stop(10 * time.Second)
	ctx := ctxT(t, 60*time.Second)
	c := g.dial(t)
	const total = 4 << 20
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"/bin/sh", "-c", "stty -echo -onlcr; printf READY; read x; head -c 4194304 /dev/zero | tr '\\0' 'x'; printf END; read x; printf AFTER; read x"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "READY"); err != nil { // the terminal echoes nothing from here
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 2<<20)); err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v, want ENOSPC", err)
	}
	f.Close()
	if _, err := ch.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	got, err := ch.ReadUntil(ctx, "END")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(got, "x"); n != total {
		t.Fatalf("the client got %d bytes of output, want all %d", n, total)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	typeUntil(ctx, t, ch, "\n", "AFTER")
	var evs []record.Event
	testutil.WaitFor(t, 10*time.Second, "AFTER in the recording", func() bool {
		_, _, evs = exportCast(ctx, t, c, ch.Session())
		return strings.Contains(castOutput(evs), "AFTER")
	})
	var dropped int64
	for _, e := range evs {
		var n int64
		if e.Code == "m" && strings.HasSuffix(e.Data, "bytes not recorded") {
			if _, err := fmt.Sscanf(e.Data, "muxterm: %d bytes not recorded", &n); err != nil {
				t.Fatal(err)
			}
			dropped += n
		}
	}
	out := castOutput(evs)
	if want := int64(total + len("READYENDAFTER")); dropped == 0 || int64(len(out))+dropped != want {
		t.Fatalf("recorded %d bytes and %d marked dropped: want drops, and %d in all", len(out), dropped, want)
	}
	// Every byte counted as dropped is marked, and every marked byte counted, once: a failed
	// write's marker says again what the markers it lost said, and counts only its own bytes.
	if got := scrapeCounter(ctx, t, g, "muxterm_recording_dropped_bytes_total"); got != float64(dropped) {
		t.Fatalf("muxterm_recording_dropped_bytes_total: got %v, want the %d bytes the markers say", got, dropped)
	}
}

// The CLI lists a recording, exports it byte for byte as recording.read gives it, and plays it
// under a real PTY with its output; a truncated or hostile file gets an error naming the line,
// and a pause of a billion seconds is cut to --idle-limit: never a hang.
func TestCLIRecordingsExportPlay(t *testing.T) {
	g := startGateway(t, "--record", t.TempDir(), "--allow-cmd", "*")
	defer g.Stop(10 * time.Second)
	ctx := ctxT(t, 60*time.Second)
	c := g.dial(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Name: "played",
		Cmd: []string{"/bin/sh", "-c", `printf 'PLAY-ME 1\n'; printf 'PLAY-ME 2\n'`}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "PLAY-ME 2"); err != nil {
		t.Fatal(err)
	}
	var want []byte
	testutil.WaitFor(t, 10*time.Second, "the recording's exit marker", func() bool {
		var evs []record.Event
		want, _, evs = exportCast(ctx, t, c, ch.Session())
		return slices.Contains(castMarks(evs), "m:exit 0")
	})
	env := cliEnv(t, g)
	out, errOut, code := runCLI(t, env, "recordings")
	if code != 0 || !strings.Contains(out, ch.Session()) || !strings.Contains(out, "played") || !strings.Contains(out, "80x24") {
		t.Fatalf("muxterm recordings: %d %q %q", code, out, errOut)
	}
	file := filepath.Join(t.TempDir(), "out.cast")
	if _, errOut, code := runCLI(t, env, "recordings", "export", "played", file); code != 0 {
		t.Fatalf("muxterm recordings export: %d %q", code, errOut)
	}
	got, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("exported %d bytes (%v), want the %d recording.read gives", len(got), err, len(want))
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o600 {
		t.Fatalf("exported file mode %v, want 0600", st.Mode().Perm())
	}
	tm := startTerm(t, env, false, "play", "--speed", "100", ch.Session())
	tm.expect("PLAY-ME 2")
	if code := tm.wait(); code != 0 {
		t.Fatalf("muxterm play: exit %d; output %q", code, tm.output())
	}

	dir := t.TempDir()
	hdr := `{"version":2,"width":80,"height":24}` + "\n"
	for name, body := range map[string]string{
		"truncated.cast": hdr + `[0.1, "o", "abc`,
		"hostile.cast":   hdr + `[0.1, "o", "a"]` + "\n" + `{"oops": true}` + "\n",
		"backwards.cast": hdr + `[2, "o", "a"]` + "\n" + `[1, "o", "b"]` + "\n",
		"noheader.cast":  `[0.1, "o", "a"]` + "\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := runCLI(t, env, "play", p)
		if code != 1 || !strings.Contains(errOut, "muxterm: play: record:") {
			t.Errorf("play %s: exit %d, stderr %q; want 1 and an error naming what is broken", name, code, errOut)
		}
	}
	long := filepath.Join(dir, "long.cast")
	if err := os.WriteFile(long, []byte(hdr+`[0.1, "o", "A"]`+"\n"+`[1000000000, "o", "B"]`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, env, "play", "--idle-limit", "10ms", long); code != 0 || out != "AB" {
		t.Fatalf("play with a billion-second pause: %d %q %q; want AB at once", code, out, errOut)
	}
}

// Who sees a recording: its owner and an admin read it; a read-only viewer of the owner's
// sessions gets forbidden (a recording may hold input it never sees live).
func TestRecordingReadersByRole(t *testing.T) {
	alice, admin, viewer := newToken(), newToken(), newToken()
	file := writeTokensFile(t, 0o600,
		tokenLine{"alice", "read-write", alice, ""},
		tokenLine{"ops", "admin", admin, ""},
		tokenLine{"carol", "read-only", viewer, "alice"})
	g := launchGateway(t, alice, []string{"MUXTERM_TOKENS=" + file}, "--record", t.TempDir())
	defer g.Stop(10 * time.Second)
	ctx := ctxT(t, 30*time.Second)
	ch, err := dialAs(t, g, alice).Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	list, err := dialAs(t, g, admin).Recordings(ctx, "")
	if err != nil || len(list) != 1 || list[0].Recording != ch.Session() {
		t.Fatalf("the admin's recording.list: %+v, %v; want alice's recording", list, err)
	}
	if _, err := dialAs(t, g, admin).ReadRecording(ctx, ch.Session(), 0, 100); err != nil {
		t.Fatalf("the admin's recording.read: %v", err)
	}
	var pe *proto.Error
	_, err = dialAs(t, g, viewer).Recordings(ctx, "")
	if !errors.As(err, &pe) || pe.Kind() != proto.KindForbidden {
		t.Fatalf("a read-only viewer's recording.list: %v, want forbidden", err)
	}
	_, err = dialAs(t, g, viewer).ReadRecording(ctx, ch.Session(), 0, 100)
	if !errors.As(err, &pe) || pe.Kind() != proto.KindForbidden {
		t.Fatalf("a read-only viewer's recording.read: %v, want forbidden", err)
	}
}
