package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestParseDetachKeys(t *testing.T) {
	for _, tc := range []struct {
		in        string
		lineStart bool
		keys      string
		bad       bool
	}{
		{in: "enter,~,.", lineStart: true, keys: "~."},
		{in: "ctrl-],d", keys: "\x1dd"},
		{in: "ctrl-p,ctrl-q", keys: "\x10\x11"},
		{in: "ctrl-A,comma", keys: "\x01,"},
		{in: "none"},
		{in: "~,enter", bad: true},
		{in: "enter", bad: true},
		{in: "ctrl-1", bad: true},
		{in: "tab", bad: true},
	} {
		d, err := parseDetachKeys(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("%q: err %v, want bad=%v", tc.in, err, tc.bad)
			continue
		}
		if !tc.bad && (d.lineStart != tc.lineStart || string(d.keys) != tc.keys) {
			t.Errorf("%q: got %v %q, want %v %q", tc.in, d.lineStart, d.keys, tc.lineStart, tc.keys)
		}
	}
}

func TestDetacher(t *testing.T) {
	ssh, _ := parseDetachKeys(defaultDetachKeys)
	ctrl, _ := parseDetachKeys("ctrl-],d")
	for _, tc := range []struct {
		name   string
		keys   detachKeys
		chunks []string
		out    string
		detach bool
	}{
		{"at start", ssh, []string{"~."}, "", true},
		{"after enter", ssh, []string{"ls\r~."}, "ls\r", true},
		{"split over reads", ssh, []string{"ls\r", "~", "."}, "ls\r", true},
		{"mid-line", ssh, []string{"a~."}, "a~.", false},
		{"tilde twice", ssh, []string{"\r~~."}, "\r~.", false},
		{"tilde then other", ssh, []string{"\r~x"}, "\r~x", false},
		{"tilde then enter", ssh, []string{"\r~\r~."}, "\r~\r", true},
		{"bytes after detach dropped", ssh, []string{"\r~.rest"}, "\r", true},
		{"ctrl anywhere", ctrl, []string{"abc\x1dd"}, "abc", true},
		{"ctrl twice", ctrl, []string{"\x1d\x1dd"}, "\x1dd", false},
		{"off", detachKeys{}, []string{"\r~."}, "\r~.", false},
	} {
		d := newDetacher(tc.keys)
		var out []byte
		detached := false
		for _, c := range tc.chunks {
			b, stop := d.feed([]byte(c))
			out = append(out, b...)
			if stop {
				detached = true
				break
			}
		}
		if string(out) != tc.out || detached != tc.detach {
			t.Errorf("%s: got %q detach=%v, want %q detach=%v", tc.name, out, detached, tc.out, tc.detach)
		}
	}
}

func TestQueryCounter(t *testing.T) {
	var q queryCounter
	q.feed([]byte("a\x1b[c b\x1b[0c \x1b[>c \x1b[6n \x1b]11;?\x07 \x1b[1;31m"))
	if q.da1 != 2 || !q.ground() {
		t.Fatalf("da1 %d ground %v, want 2 true", q.da1, q.ground())
	}
	q.feed([]byte("\x1b]0;title"))
	if q.ground() {
		t.Fatal("ground inside an OSC")
	}
	q.feed([]byte("\x1b\\\x1b["))
	if q.ground() {
		t.Fatal("ground inside a CSI")
	}
	q.feed([]byte("c"))
	if q.da1 != 3 || !q.ground() {
		t.Fatalf("da1 %d ground %v, want 3 true", q.da1, q.ground())
	}
}

func TestReplyFilter(t *testing.T) {
	replies := "\x1b[?62;22c\x1b[12;1R\x1b]11;rgb:0000/0000/0000\x1b\\\x1b]10;rgb:ffff/ffff/ffff\x07\x1b[?2004;2$y\x1bP1$r0m\x1b\\\x1b[0n"
	keys := "ls\x1b[A\x1b[1;5D\x1bOP\x1bx\r"
	f := newReplyFilter(true)
	var out []byte
	// Byte by byte: every split of a sequence across reads.
	for _, b := range []byte(replies[:16] + keys + replies[16:]) {
		out = append(out, f.feed([]byte{b})...)
	}
	if string(out) != keys {
		t.Fatalf("passed %q, want the keys %q", out, keys)
	}
	// The sentinel follows one DA1 query: the second DA1 reply disarms.
	f = newReplyFilter(true)
	f.sentinelSent(1)
	out = f.feed([]byte("a\x1b[?1;2c" + "b\x1b[?1;2c" + "\x1b[5;5R"))
	if string(out) != "ab\x1b[5;5R" || f.armed {
		t.Fatalf("after the sentinel's answer: %q armed=%v", out, f.armed)
	}
	// A held ESC is released on disarm.
	g := newReplyFilter(true)
	if out := g.feed([]byte("q\x1b")); string(out) != "q" {
		t.Fatalf("got %q", out)
	}
	if p := g.disarm(); string(p) != "\x1b" {
		t.Fatalf("disarm released %q", p)
	}
	if out := g.feed([]byte("\x1b[?1;2c")); string(out) != "\x1b[?1;2c" {
		t.Fatalf("disarmed filter changed %q", out)
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"XDG_CONFIG_HOME": dir}
	getenv := func(k string) string { return env[k] }
	path := filepath.Join(dir, "muxterm", "config")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("# mine\nurl = http://127.0.0.1:9/\ntoken = tok-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := resolveConfig("", "", getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.url != "ws://127.0.0.1:9/ws" || c.token != "tok-from-file" || c.tokenFrom != path {
		t.Fatalf("got %+v", c)
	}
	env["MUXTERM_TOKEN"] = "tok-from-env"
	if c, err = resolveConfig("", "", getenv); err != nil || c.token != "tok-from-env" {
		t.Fatalf("env: %+v %v", c, err)
	}
	if c, err = resolveConfig("wss://h:1", "tok-flag", getenv); err != nil || c.token != "tok-flag" || c.url != "wss://h:1/ws" {
		t.Fatalf("flags: %+v %v", c, err)
	}
	if runtime.GOOS == "windows" {
		return
	}
	delete(env, "MUXTERM_TOKEN")
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err = resolveConfig("", "", getenv)
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("group-readable config: %v", err)
	}
}
