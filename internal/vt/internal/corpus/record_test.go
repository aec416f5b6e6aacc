//go:build vtrecord

// The recorder of the corpus: go test -tags vtrecord -run TestRecord ./internal/vt/internal/corpus
// runs each program under a real PTY (TERM=xterm-256color, 80x24 to start) and writes its
// output, with the resizes at their places, to internal/vt/testdata/corpus/<name>.rec.
package corpus

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// session is one program under a PTY being recorded.
type session struct {
	t    *testing.T
	ptmx *os.File
	cmd  *exec.Cmd

	mu   sync.Mutex // guards rec and out
	rec  []byte     // the recording
	out  []byte     // all output, to wait on
	seen int        // how much of out earlier waits consumed (test goroutine only)
	done chan struct{}
}

func start(t *testing.T, dir string, argv ...string) *session {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{"TERM=xterm-256color", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir,
		"LANG=C.UTF-8", "LC_ALL=C.UTF-8", "PS1=$ ", "SHELL=/bin/sh"}
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	s := &session{t: t, ptmx: ptmx, cmd: cmd, rec: AppendResize(nil, 80, 24), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 32<<10)
		for {
			n, err := ptmx.Read(buf)
			if n > 0 {
				s.mu.Lock()
				s.rec = AppendData(s.rec, buf[:n])
				s.out = append(s.out, buf[:n]...)
				s.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		ptmx.Close()
		<-s.done
	})
	return s
}

// wait waits until marker appears in output not yet consumed, or fails at the deadline.
func (s *session) wait(marker string) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		i := bytes.Index(s.out[s.seen:], []byte(marker))
		if i >= 0 {
			s.seen += i + len(marker)
		}
		s.mu.Unlock()
		if i >= 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatalf("no %q in the output within 10s", marker)
}

// quiet waits until no output came for d (at most 5 s).
func (s *session) quiet(d time.Duration) {
	deadline := time.Now().Add(5 * time.Second)
	last := -1
	for time.Now().Before(deadline) {
		s.mu.Lock()
		n := len(s.out)
		s.mu.Unlock()
		if n == last {
			return
		}
		last = n
		time.Sleep(d)
	}
}

func (s *session) send(keys string) {
	if _, err := s.ptmx.Write([]byte(keys)); err != nil {
		s.t.Fatalf("send %q: %v", keys, err)
	}
}

func (s *session) resize(cols, rows int) {
	s.mu.Lock()
	s.rec = AppendResize(s.rec, cols, rows)
	if err := pty.Setsize(s.ptmx, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		s.t.Fatalf("resize: %v", err)
	}
	s.mu.Unlock()
}

// save writes the recording so far.
func (s *session) save(name string) {
	s.mu.Lock()
	rec := append([]byte(nil), s.rec...)
	s.mu.Unlock()
	path := filepath.Join("..", "..", "testdata", "corpus", name+".rec")
	if err := os.WriteFile(path, rec, 0o644); err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("%s: %d bytes", path, len(rec))
}

func TestRecord(t *testing.T) {
	dir := t.TempDir()
	var long strings.Builder
	for i := range 400 {
		fmt.Fprintf(&long, "line %03d: the quick brown fox jumps over the lazy dog %d\n", i, i*i)
	}
	if err := os.WriteFile(filepath.Join(dir, "long.txt"), []byte(long.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join("..", "..", "testdata", "corpus"), 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("vim", func(t *testing.T) {
		s := start(t, dir, "vim", "-u", "NONE", "-i", "NONE", "-N", "long.txt")
		s.wait("line 000")
		s.send(":syntax on\r:set number\r:set mouse=a\r")
		s.quiet(100 * time.Millisecond)
		s.send("jjjjj10Gwwihello world 中文 \x1b")
		s.wait("hello")
		s.send("50%")
		s.quiet(200 * time.Millisecond)
		s.send("Oinserted line\x1b:set nonumber\r")
		s.quiet(200 * time.Millisecond)
		s.save("vim") // vim still runs, in the alternate screen
	})
	t.Run("less", func(t *testing.T) {
		s := start(t, dir, "less", "long.txt")
		s.wait("line 000")
		s.send(" ")
		s.wait("line 02")
		s.send("/fox 2\r")
		s.quiet(100 * time.Millisecond)
		s.send("G")
		s.wait("(END)")
		s.send("g")
		s.quiet(100 * time.Millisecond)
		s.save("less")
	})
	t.Run("top", func(t *testing.T) {
		s := start(t, dir, "top", "-d", "0.2")
		s.wait("load average")
		s.wait("load average")
		s.wait("load average")
		s.send("q")
		s.quiet(100 * time.Millisecond)
		s.save("top")
	})
	t.Run("tmux", func(t *testing.T) {
		kill := func() { _ = exec.Command("tmux", "-L", "vtrec", "kill-server").Run() }
		kill()
		t.Cleanup(kill)
		s := start(t, dir, "tmux", "-L", "vtrec", "-f", "/dev/null", "new-session", "sh")
		s.wait("[0]")
		s.send("echo one two three\r")
		s.wait("one two three")
		s.quiet(200 * time.Millisecond)
		s.send("\x02") // the prefix alone first: tmux reads it as a key of its own then
		s.quiet(100 * time.Millisecond)
		s.send("%") // split the window left and right
		s.quiet(200 * time.Millisecond)
		s.send("ls -l /usr/bin | head -40\r")
		s.quiet(200 * time.Millisecond)
		s.send("\x02")
		s.quiet(100 * time.Millisecond)
		s.send("\"") // and the right pane top and bottom
		s.quiet(200 * time.Millisecond)
		s.send("printf '\\033[1;31mred\\033[m 中文\\n'\r")
		s.quiet(300 * time.Millisecond)
		s.save("tmux")
	})
	t.Run("ls", func(t *testing.T) {
		s := start(t, dir, "sh", "-c", "ls --color=always -l /usr/bin | head -300; echo DONE")
		s.wait("DONE")
		s.save("ls")
	})
	t.Run("cjk", func(t *testing.T) {
		s := start(t, dir, "sh", "-c", `printf '漢字かなカナ한국어 \033[1;32mテスト\033[m 😀🎉🚀 👍🏽 ✅ ❤️ ⚡\n'; `+
			`for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30; do `+
			`printf '行%s 中文字符显示测试 全角ＡＢＣ 😀 wrap wrap wrap wrap wrap wrap wrap wrap wrap 終わり\n' $i; done; `+
			`printf 'é e\314\201 combining\n'; echo DONE`)
		s.wait("DONE")
		s.save("cjk")
	})
	t.Run("altregion", func(t *testing.T) {
		s := start(t, dir, "sh", "-c", `printf 'before\n\033[?1049h\033[H\033[2J\033[1;1Hheader\033[24;1Hfooter\033[2;23r\033[2;1H'; `+
			`for i in $(seq 1 60); do printf '\033[3%dmregion line %s\033[m\n' $((i % 8)) $i; done; `+
			`printf '\033[2;1H\033[3L\033[5;1H\033[2M\033[10;1H\033M\033M\033[r\033[12;30HDONE'; sleep 0.2`)
		s.wait("DONE")
		s.quiet(100 * time.Millisecond)
		s.save("altregion")
	})
	t.Run("resize", func(t *testing.T) {
		s := start(t, dir, "sh")
		s.wait("$ ")
		s.send("seq 1 30; stty size\r")
		s.wait("24 80")
		s.resize(100, 30)
		s.send("stty size; printf '%0100d\\n' 0\r")
		s.wait("30 100")
		s.resize(50, 12)
		s.send("stty size; seq 1 5\r")
		s.wait("12 50")
		s.resize(120, 40)
		s.send("stty size; ls --color=always /usr/bin | head -20\r")
		s.wait("40 120")
		s.quiet(100 * time.Millisecond)
		s.save("resize")
	})
}
