package gateway

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const (
	tokA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	tokB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	tokV = "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"
	tokO = "oooooooooooooooooooooooooooooooo"
)

func TestParseTokens(t *testing.T) {
	in := "# principal role token [view-of=owner]\n" +
		"\n" +
		"alice  read-write " + tokA + "\r\n" +
		"\tbob\tread-write\t" + tokB + "   # bob's laptop\n" +
		"carol read-only " + tokV + " view-of=alice\n" +
		"   # indented comment\n" +
		"ops admin " + tokO + "\n"
	got, err := ParseTokens(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []TokenEntry{
		{Principal{Name: "alice"}, tokA, 3},
		{Principal{Name: "bob"}, tokB, 4},
		{Principal{Name: "carol", ReadOnly: true, ViewOf: "alice"}, tokV, 5},
		{Principal{Name: "ops", Admin: true}, tokO, 7},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestParseTokensRefusesWithoutEchoingTheToken(t *testing.T) {
	secret := "s3cr3t-t0ken.value_with~all+ok/chars="
	cases := []struct {
		name, line, want string
	}{
		{"two fields", "alice read-write", "line 1: want <principal> <role> <token>"},
		{"five fields", "alice read-write " + secret + " view-of=x extra", "line 1: want at most 4 fields"},
		{"unknown role", "alice root " + secret, "line 1: role must be read-write, admin or read-only"},
		{"role case", "alice Read-Write " + secret, "line 1: role must be"},
		{"short token", "alice read-write abc123", "line 1: token too short"},
		{"token with a quote", "alice read-write " + secret + `"x`, "line 1: token has a character outside"},
		{"token with a semicolon", "alice read-write " + secret + ";x", "line 1: token has a character outside"},
		{"long token", "alice read-write " + strings.Repeat("x", 513), "line 1: token too long"},
		{"bad principal", "al/ice read-write " + secret, "line 1: principal name may only hold"},
		{"long principal", strings.Repeat("p", 65) + " read-write " + secret, "line 1: principal name must have"},
		{"read-only without view-of", "carol read-only " + secret, "line 1: a read-only principal needs view-of"},
		{"read-write with view-of", "alice read-write " + secret + " view-of=bob", "line 1: view-of is only for read-only"},
		{"fourth field not view-of", "carol read-only " + secret + " watch=alice", "line 1: the fourth field must be view-of="},
		{"empty view-of", "carol read-only " + secret + " view-of=", "line 1: view-of: principal name must have"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTokens(strings.NewReader(tc.line + "\n"))
			if err == nil {
				t.Fatalf("got nil, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "abc123") {
				t.Errorf("error %q contains the token", err)
			}
		})
	}
}

func TestParseTokensRefusesHugeFile(t *testing.T) {
	big := bytes.Repeat([]byte("# padding padding padding padding\n"), maxTokenFileSize/34+2)
	if _, err := ParseTokens(bytes.NewReader(big)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("got %v, want a size error", err)
	}
}

func writeTokens(t *testing.T, mode os.FileMode, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadPrincipals(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	good := "alice read-write " + tokA + "\ncarol read-only " + tokV + " view-of=alice\n"
	cases := []struct {
		name    string
		token   string
		mode    os.FileMode
		body    string // "" with mode 0: no file
		want    map[string]Principal
		wantErr string
		warn    bool
	}{
		{name: "single token", token: tokB,
			want: map[string]Principal{tokB: {Name: "default", Admin: true}}},
		{name: "file only", mode: 0o600, body: good,
			want: map[string]Principal{tokA: {Name: "alice"}, tokV: {Name: "carol", ReadOnly: true, ViewOf: "alice"}}},
		{name: "both", token: tokB, mode: 0o400, body: good,
			want: map[string]Principal{tokB: {Name: "default", Admin: true}, tokA: {Name: "alice"}, tokV: {Name: "carol", ReadOnly: true, ViewOf: "alice"}}},
		{name: "viewer of default", token: tokB, mode: 0o600, body: "carol read-only " + tokV + " view-of=default\n",
			want: map[string]Principal{tokB: {Name: "default", Admin: true}, tokV: {Name: "carol", ReadOnly: true, ViewOf: "default"}}},
		{name: "group-readable warns", mode: 0o640, body: good, warn: true,
			want: map[string]Principal{tokA: {Name: "alice"}, tokV: {Name: "carol", ReadOnly: true, ViewOf: "alice"}}},
		{name: "world-readable", mode: 0o644, body: good, wantErr: "mode 0644 lets other users read or change the tokens; chmod 600 it"},
		{name: "group-writable", mode: 0o620, body: good, wantErr: "mode 0620"},
		{name: "world-writable only", mode: 0o602, body: good, wantErr: "mode 0602"},
		{name: "nothing", wantErr: "no token: give --token or --tokens"},
		{name: "empty file", mode: 0o600, body: "# nobody\n", wantErr: "no token"},
		{name: "short --token", token: "abc", wantErr: "--token: token too short"},
		{name: "default twice", token: tokB, mode: 0o600, body: "default read-write " + tokA + "\n",
			wantErr: `line 1: principal "default" is already defined by --token`},
		{name: "principal twice", mode: 0o600, body: "alice read-write " + tokA + "\nalice read-write " + tokB + "\n",
			wantErr: `line 2: principal "alice" is already defined by --tokens`},
		{name: "token twice in the file", mode: 0o600, body: "alice read-write " + tokA + "\nbob read-write " + tokA + "\n",
			wantErr: "line 2: token already used by another principal"},
		{name: "token of --token reused", token: tokA, mode: 0o600, body: "alice read-write " + tokA + "\n",
			wantErr: "line 1: token already used by another principal"},
		{name: "view-of nobody", mode: 0o600, body: "carol read-only " + tokV + " view-of=alice\n",
			wantErr: "line 1: view-of=alice: no such principal"},
		{name: "view-of a viewer", mode: 0o600, body: "alice read-write " + tokA + "\ncarol read-only " + tokV + " view-of=alice\ndan read-only " + tokB + " view-of=carol\n",
			wantErr: "line 3: view-of=carol: that principal is read-only"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs.Reset()
			path := ""
			if tc.mode != 0 {
				path = writeTokens(t, tc.mode, tc.body)
			}
			got, err := LoadPrincipals(tc.token, path, log)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				for _, tok := range []string{tokA, tokB, tokV} {
					if strings.Contains(err.Error(), tok) {
						t.Errorf("error %q contains a token", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if gotWarn := strings.Contains(logs.String(), "readable by its group"); gotWarn != tc.warn {
				t.Errorf("warned: got %v, want %v (%s)", gotWarn, tc.warn, logs.String())
			}
		})
	}
}

func TestLoadPrincipalsRefusesADirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := LoadPrincipals("", dir, nil)
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("got %v, want not a regular file", err)
	}
}

func TestPrincipalOwner(t *testing.T) {
	cases := []struct {
		p    Principal
		want string
	}{
		{Principal{Name: "alice"}, "alice"},
		{Principal{Name: "carol", ReadOnly: true, ViewOf: "alice"}, "alice"},
	}
	for _, tc := range cases {
		if got := tc.p.Owner(); got != tc.want {
			t.Errorf("%+v.Owner(): got %q, want %q", tc.p, got, tc.want)
		}
	}
}

func TestSocketLimit(t *testing.T) {
	var l socketLimit
	steps := []struct {
		op   string // "+" acquire, "-" release
		name string
		want bool
		held int
	}{
		{"+", "a", true, 1}, {"+", "a", true, 2}, {"+", "a", false, 2}, {"+", "b", true, 1},
		{"-", "a", true, 1}, {"+", "a", true, 2}, {"-", "a", true, 1}, {"-", "a", true, 0},
	}
	for i, s := range steps {
		got := true
		if s.op == "+" {
			got = l.acquire(s.name, 2)
		} else {
			l.release(s.name)
		}
		if got != s.want || l.held(s.name) != s.held {
			t.Fatalf("step %d %s%s: got %v held %d, want %v held %d", i, s.op, s.name, got, l.held(s.name), s.want, s.held)
		}
	}
	if len(l.n) != 1 {
		t.Errorf("entries left: got %d, want 1 (b)", len(l.n))
	}
}

// FuzzParseTokens checks that ParseTokens never panics, that every entry it accepts is valid
// (a valid token and principal, view-of exactly on read-only lines), and that no error ever
// repeats a field of the input long enough to be a token.
func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{
		"alice read-write " + tokA + "\n",
		"# comment\n\nalice read-write " + tokA + " # laptop\r\ncarol read-only " + tokV + " view-of=alice\n",
		"carol read-only " + tokV + "\n",
		"alice read-write " + tokA + " view-of=bob\n",
		"alice admin " + tokA + "\n",
		"alice read-write short\n",
		"alice read-write " + tokA + `"` + "\n",
		"a b c d e f\n",
		"\x00\xff read-write " + tokA,
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := ParseTokens(bytes.NewReader(b))
		if err != nil {
			for _, line := range strings.Split(string(b), "\n") {
				for _, field := range strings.Fields(line) {
					if len(field) >= minTokenLen && strings.Contains(err.Error(), field) {
						t.Fatalf("error %q repeats input field %q", err, field)
					}
				}
			}
			return
		}
		for _, e := range entries {
			if ValidToken(e.Token) != nil || validPrincipalName(e.Principal.Name) != nil {
				t.Fatalf("accepted invalid entry %+v", e)
			}
			if e.Principal.ReadOnly != (e.Principal.ViewOf != "") {
				t.Fatalf("accepted %+v: view-of must go with read-only", e)
			}
			if e.Line < 1 {
				t.Fatalf("entry %+v has no line", e)
			}
		}
	})
}

// FuzzOriginAndHost checks that the Origin and Host checks accept exactly the gateway's own
// origin and the configured ones after normalisation, never a string that merely contains,
// starts with or ends with one of them.
func FuzzOriginAndHost(f *testing.F) {
	for _, s := range []string{
		"http://127.0.0.1:8222", "HTTP://127.0.0.1:8222", "http://localhost:8222", "https://ide.example:8443",
		"https://IDE.example:8443/", "http://127.0.0.1:8222.evil.example", "http://evil.example/http://127.0.0.1:8222",
		"http://127.0.0.1:8222@evil.example", "null", "", "http://[::1]:8222", "https://ide.example:8443.evil",
		"http://127.0.0.1:8222/x", "http://127.0.0.1:8222?x", "http://127.0.0.1:8222#x", "ws://127.0.0.1:8222",
	} {
		f.Add(s, "127.0.0.1:8222")
		f.Add(s, "ide.example:8443")
	}
	g := &Gateway{opts: Options{ListenAddr: "127.0.0.1:8222", AllowOrigins: []string{"https://ide.example:8443"},
		AllowHosts: []string{"muxterm.example"}}}
	allowedOrigins := map[string]bool{"https://ide.example:8443": true}
	f.Fuzz(func(t *testing.T, origin, host string) {
		if g.hostAllowed(host) {
			h, p := splitHostPort(strings.ToLower(host))
			if p == "" {
				p = "80"
			}
			ip := net.ParseIP(h)
			okLocal := p == "8222" && (h == "localhost" || (ip != nil && ip.IsLoopback()))
			okExtra := (h == "muxterm.example" && p == "80") || (h == "ide.example" && p == "8443")
			if !okLocal && !okExtra {
				t.Fatalf("hostAllowed(%q) = true", host)
			}
		}
		if !g.originAllowed(origin, host) {
			return
		}
		n, err := normOrigin(origin)
		if err != nil {
			t.Fatalf("originAllowed(%q) accepted an origin normOrigin refuses: %v", origin, err)
		}
		self, err := normOrigin("http://" + host)
		if n != self && !allowedOrigins[n] {
			t.Fatalf("originAllowed(%q, host %q) = true: normalised %q, self %q (%v)", origin, host, n, self, err)
		}
		if again, err := normOrigin(n); err != nil || again != n {
			t.Fatalf("normOrigin is not idempotent on %q: %q, %v", n, again, err)
		}
	})
}
