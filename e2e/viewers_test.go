//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/internal/testutil/rawmux"
	"github.com/muxterm/muxterm/proto"
)

func TestWindowSizeFlag(t *testing.T) {
	type size struct{ cols, rows int }
	for _, tc := range []struct {
		policy  string
		both    size // once the second viewer attached at 60x40
		resized size // once the opener resized to 70x30
	}{
		{"latest", size{60, 40}, size{70, 30}},
		{"smallest", size{60, 24}, size{60, 30}},
		{"largest", size{80, 40}, size{70, 40}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, "--window-size", tc.policy)
			ctx := ctxT(t, 60*time.Second)
			c := g.dial(t)
			a, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
			if err != nil {
				t.Fatal(err)
			}
			n := 1000
			// stty types a probe through write and waits for its answer in read: the shell
			// echoes "X$((n+1))" as typed and prints the number only in the answer.
			answer := regexp.MustCompile(`S(\d+) (\d+)X(\d+)`)
			stty := func(write func(string), read func(string) string, want size) {
				t.Helper()
				n++
				write(fmt.Sprintf("echo S$(stty size)X$((%d+1))\r", n-1))
				got := read(fmt.Sprintf("X%d\r\n", n))
				m := answer.FindAllStringSubmatch(got, -1)
				if len(m) == 0 || m[len(m)-1][1] != fmt.Sprint(want.rows) || m[len(m)-1][2] != fmt.Sprint(want.cols) {
					t.Fatalf("stty size: got %q, want rows %d cols %d", got[max(len(got)-120, 0):], want.rows, want.cols)
				}
			}
			aWrite := func(s string) {
				if _, err := a.Write([]byte(s)); err != nil {
					t.Fatal(err)
				}
			}
			aRead := func(until string) string {
				out, err := a.ReadUntil(ctx, until)
				if err != nil {
					t.Fatal(err)
				}
				return out
			}

			b := rawmux.Dial(t, g.WS, http.Header{"Authorization": {"Bearer " + g.Token}})
			var att proto.AttachResult
			b.Result("session.attach", map[string]any{"channel": 5, "session": a.Session(), "cols": 60, "rows": 40}, &att)
			if (size{att.Cols, att.Rows}) != tc.both {
				t.Errorf("attach result: got %dx%d, want %+v", att.Cols, att.Rows, tc.both)
			}
			bRead := func(until string) string { return b.WaitOutput(5, until) }
			stty(func(s string) { b.Input(5, s) }, bRead, tc.both)

			var applied proto.ResizeResult
			if err := c.Call(ctx, "session.resize", map[string]any{"channel": 1, "cols": 70, "rows": 30}, &applied); err != nil {
				t.Fatal(err)
			}
			if (size{applied.Cols, applied.Rows}) != tc.resized {
				t.Errorf("resize to 70x30: applied %dx%d, want %+v", applied.Cols, applied.Rows, tc.resized)
			}
			if tc.resized != tc.both {
				b.ExpectSize(5, tc.resized.cols, tc.resized.rows)
			}
			stty(aWrite, aRead, tc.resized)

			b.Close() // the second viewer's socket ends
			// The gateway recomputes the size when it sees the socket end: wait for a's
			// session.size before asking the shell (the size may already be a's own).
			for deadline := time.After(10 * time.Second); ; {
				if cols, rows := a.Size(); cols == 70 && rows == 30 {
					break
				}
				select {
				case <-a.SizeChanged():
				case <-deadline:
					cols, rows := a.Size()
					t.Fatalf("after the second viewer left: size %dx%d, want 70x30", cols, rows)
				}
			}
			stty(aWrite, aRead, size{70, 30})
		})
	}
}

// TestSessionEnvironment: a session's environment is the gateway's without MUXTERM_* (the
// token), OTEL_* and what --env-deny (flag and environment twin together) names, with the
// terminal type muxterm sets.
func TestSessionEnvironment(t *testing.T) {
	tok := randomToken()
	g := launchGateway(t, tok, []string{
		"MUXTERM_TOKEN=" + tok,
		"MUXTERM_ENV_DENY=E2E_DENIED_BY_TWIN",
		"OTEL_SERVICE_NAME=e2e-otel-marker",
		"E2E_ALLOWED=visible-value",
		"E2E_SECRET_ONE=hidden-one",
		"E2E_DENIED_BY_TWIN=hidden-two",
		"TERM=dumb",
		"COLUMNS=7",
	}, "--env-deny", "E2E_SECRET_*", "--allow-cmd", "env")
	ctx := ctxT(t, 30*time.Second)
	c := g.dial(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"env"}})
	if err != nil {
		t.Fatal(err)
	}
	// session.exit follows the output the program printed: by then it is all buffered.
	testutil.WaitClosedCtx(ctx, t, ch.Exited(), "env did not exit")
	var out bytes.Buffer
	buf := make([]byte, 64<<10)
	for ch.Buffered() > 0 {
		n, err := ch.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(buf[:n])
	}
	env := map[string]string{}
	for line := range strings.SplitSeq(strings.ReplaceAll(out.String(), "\r\n", "\n"), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	if len(env) == 0 {
		t.Fatalf("no environment printed: %q", out.String())
	}
	for k, v := range env {
		if strings.HasPrefix(k, "MUXTERM_") || strings.HasPrefix(k, "OTEL_") || strings.Contains(v, tok) {
			t.Errorf("the gateway's own %s=%q reached the session", k, v)
		}
	}
	for _, k := range []string{"E2E_SECRET_ONE", "E2E_DENIED_BY_TWIN", "COLUMNS"} {
		if v, ok := env[k]; ok {
			t.Errorf("%s=%q reached the session, want it denied", k, v)
		}
	}
	for k, want := range map[string]string{"E2E_ALLOWED": "visible-value", "TERM": "xterm-256color",
		"COLORTERM": "truecolor", "PATH": os.Getenv("PATH")} {
		if got := env[k]; got != want {
			t.Errorf("%s: got %q, want %q", k, got, want)
		}
	}
}

// runBinary runs the gateway binary with args and returns its stdout, stderr and exit status.
func runBinary(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCmd(t, 20*time.Second, nil, binary(t), args...)
}

// TestGatewayCLI: --help says what muxterm is, lists every flag with its MUXTERM_* twin and
// default and ends with two examples; --version prints the version and commit; an unknown
// flag or a bad value gets one error line and the hint, exit status 2.
func TestGatewayCLI(t *testing.T) {
	t.Run("help", func(t *testing.T) {
		out, errOut, code := runBinary(t, "--help")
		if code != 0 || errOut != "" {
			t.Fatalf("--help: exit %d, stderr %q; want 0 and nothing", code, errOut)
		}
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if !strings.HasPrefix(lines[0], "muxterm is a WebSocket gateway") {
			t.Errorf("first line: got %q, want one saying what muxterm is", lines[0])
		}
		flagLine := regexp.MustCompile(`^  --([a-z-]+)\b.*\s(MUXTERM_[A-Z_]+|\(no twin\))\s+default: \S`)
		seen := map[string]bool{}
		for _, l := range lines {
			if !strings.HasPrefix(l, "  --") {
				continue
			}
			m := flagLine.FindStringSubmatch(l)
			if m == nil {
				t.Errorf("flag line without twin or default: %q", l)
				continue
			}
			seen[m[1]] = true
			if want := "MUXTERM_" + strings.ToUpper(strings.ReplaceAll(m[1], "-", "_")); m[1] != "version" && m[2] != want {
				t.Errorf("--%s: twin %s, want %s", m[1], m[2], want)
			}
		}
		for _, f := range []string{"listen", "token", "tokens", "window-size", "env-deny", "resume-hold",
			"max-input-rate", "allow-cmd", "pprof-listen", "version"} {
			if !seen[f] {
				t.Errorf("--help does not list --%s", f)
			}
		}
		i := slices.Index(lines, "Examples:")
		if i < 0 {
			t.Fatalf("no Examples: section at the end:\n%s", out)
		}
		var examples []string
		for _, l := range lines[i+1:] {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				examples = append(examples, l)
			}
		}
		if len(examples) != 2 || !strings.HasPrefix(examples[0], "gateway") || !strings.Contains(examples[1], "gateway ") {
			t.Errorf("examples: got %q, want two gateway command lines", examples)
		}
	})
	t.Run("version", func(t *testing.T) {
		out, errOut, code := runBinary(t, "--version")
		if code != 0 || errOut != "" {
			t.Fatalf("--version: exit %d, stderr %q; want 0 and nothing", code, errOut)
		}
		if !regexp.MustCompile(`^muxterm gateway \S+ \(commit \S+\)\n$`).MatchString(out) {
			t.Errorf("--version: got %q, want \"muxterm gateway <version> (commit <commit>)\"", out)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--no-such-flag"}, "gateway: flag provided but not defined: -no-such-flag\n"},
		{"bad value", []string{"--window-size", "tallest"}, `gateway: invalid value "tallest" for flag -window-size: window size "tallest": want latest, smallest or largest` + "\n"},
		{"bad env pattern", []string{"--env-deny", "A-B"}, `gateway: invalid value "A-B" for flag -env-deny: env pattern "A-B": want NAME or PREFIX* (letters, digits, _)` + "\n"},
		{"value out of range", []string{"--window", "1"}, "gateway: --window must be between 1KiB and 64MiB\n"},
		{"bad env twin", []string{"--window-size", "latest", "--kill-grace", "0"}, "gateway: --idle-grace, --reap-interval and --kill-grace must be positive\n"},
		{"bad log level", []string{"--log-level", "loud"}, "gateway: --log-level: slog: level string \"loud\": unknown name\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runBinary(t, tc.args...)
			if want := tc.want + "Run 'gateway --help' for usage.\n"; code != 2 || errOut != want || out != "" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2, nothing, %q", tc.args, code, out, errOut, want)
			}
		})
	}
}
