package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/gorilla/websocket"
)

// passthrough is the minimal baseline between a raw PTY and muxterm: one WebSocket per PTY, no
// multiplexing, no protocol, no flow control. Per connection it runs `sh -c <query sh>` on a
// PTY, copies PTY reads to binary messages and binary messages to the PTY, and kills the
// process group when either side ends. It serves 127.0.0.1 only.
//
// muxbench runs it in a process of its own (itself, re-executed with passthroughArg), like the
// gateway: served from muxbench's own process, the baseline would skip the wake-up of another
// process on every message, which the gateway cannot (about 45 µs of an echo here).
type passthrough struct {
	*child
	addr string
}

// passthroughArg, as muxbench's only argument, makes it serve the pass-through instead.
const passthroughArg = "-serve-passthrough"

const passthroughPrefix = "muxbench pass-through on "

// startPassthrough starts the pass-through process; every process it starts carries tag.
func startPassthrough(ctx context.Context, tag string) (*passthrough, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("pass-through: find muxbench's executable: %w", err)
	}
	cmd := exec.Command(exe, passthroughArg)
	cmd.Env = append(os.Environ(), tag)
	cmd.Stderr = os.Stderr
	// If muxbench dies, the kernel kills the pass-through; its shells then get SIGHUP from their
	// PTYs (the baselines run cat, yes, head and base64, which all die of it).
	c, err := startChild(cmd)
	if err != nil {
		return nil, fmt.Errorf("pass-through: %w", err)
	}
	p := &passthrough{child: c}
	err = c.waitLines(ctx, func(line string) bool {
		a, ok := strings.CutPrefix(line, passthroughPrefix)
		p.addr = a
		return ok
	})
	if err != nil {
		p.close()
		return nil, fmt.Errorf("start pass-through: %w", err)
	}
	return p, nil
}

// close stops the pass-through process: SIGTERM, on which it ends every connection (their
// processes are killed) and exits; SIGKILL if it has not within 10 s.
func (p *passthrough) close() { p.terminate() }

// ptServer is the pass-through server, inside the pass-through process.
type ptServer struct {
	srv *http.Server

	mu    sync.Mutex
	conns map[*websocket.Conn]struct{}
	wg    sync.WaitGroup // connection handlers
}

// servePassthrough is the pass-through process: it serves 127.0.0.1:0, prints the address,
// and on SIGTERM or SIGINT ends every connection and returns.
func servePassthrough() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for pass-through: %w", err)
	}
	p := &ptServer{conns: map[*websocket.Conn]struct{}{}}
	up := websocket.Upgrader{ReadBufferSize: 16 << 10, WriteBufferSize: 64 << 10}
	p.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			script := r.URL.Query().Get("sh")
			if script == "" {
				http.Error(w, "sh missing", http.StatusBadRequest)
				return
			}
			ws, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			p.wg.Add(1)
			defer p.wg.Done()
			p.mu.Lock()
			p.conns[ws] = struct{}{}
			p.mu.Unlock()
			serveConn(ws, script)
			p.mu.Lock()
			delete(p.conns, ws)
			p.mu.Unlock()
		})}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	served := make(chan error, 1)
	go func() { served <- p.srv.Serve(ln) }()
	fmt.Printf("%s%s\n", passthroughPrefix, ln.Addr())
	select {
	case <-sig:
	case err := <-served:
		return fmt.Errorf("pass-through serve: %w", err)
	}
	_ = p.srv.Close()
	p.mu.Lock()
	for ws := range p.conns {
		ws.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// serveConn runs one connection's PTY until the PTY or the socket ends. The command inherits
// the pass-through's environment, which carries the run's tag.
func serveConn(ws *websocket.Conn, script string) {
	defer ws.Close()
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
	if err != nil {
		_ = ws.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseInternalServerErr, "spawn failed"), time.Now().Add(time.Second))
		return
	}
	outDone := make(chan struct{})
	go func() { // PTY → socket
		defer close(outDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				if werr := ws.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				_ = ws.WriteMessage(websocket.CloseMessage,
					websocket.FormatCloseMessage(websocket.CloseNormalClosure, "pty ended"))
				return
			}
		}
	}()
	inDone := make(chan struct{})
	go func() { // socket → PTY
		defer close(inDone)
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				break
			}
			if _, err := f.Write(data); err != nil {
				break
			}
		}
		// The client left (or the PTY is gone): end the process so the PTY reader ends.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}()
	<-outDone
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	ws.Close() // ends the socket reader
	<-inDone   // it signals the group too: reap only after it is done, so the pid is not reused
	_ = cmd.Wait()
	f.Close()
}

// URL is the address of a connection running script.
func (p *passthrough) URL(script string) string {
	return "ws://" + p.addr + "/?sh=" + url.QueryEscape(script)
}

// dial connects to the pass-through, which starts script.
func (p *passthrough) dial(ctx context.Context, script string) (*websocket.Conn, error) {
	ws, _, err := benchDialer().DialContext(ctx, p.URL(script), nil)
	if err != nil {
		return nil, fmt.Errorf("dial pass-through %s: %w", p.addr, err)
	}
	return ws, nil
}

// dialCat connects to the pass-through running catScript and waits for its R (the terminal is
// raw and cat is about to run), or ctx's end.
func (p *passthrough) dialCat(ctx context.Context) (*websocket.Conn, error) {
	ws, err := p.dial(ctx, catScript)
	if err != nil {
		return nil, err
	}
	defer context.AfterFunc(ctx, func() { _ = ws.Close() })() // a ctx that ends ends the wait
	for {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			ws.Close()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("pass-through: wait for R: %w (%w)", context.Cause(ctx), err)
			}
			return nil, fmt.Errorf("pass-through: wait for R: %w", err)
		}
		if bytes.IndexByte(msg, 'R') >= 0 {
			return ws, nil
		}
	}
}

// ptReadAtLeast reads messages until n payload bytes arrived.
func ptReadAtLeast(ws *websocket.Conn, n int64) (int64, error) {
	var got int64
	for got < n {
		_, r, err := ws.NextReader()
		if err != nil {
			return got, fmt.Errorf("pass-through read %d of %d bytes: %w", got, n, err)
		}
		m, err := readCount(r)
		got += m
		if err != nil {
			return got, fmt.Errorf("pass-through read %d of %d bytes: %w", got, n, err)
		}
	}
	return got, nil
}

// ptFlood counts what one pass-through connection receives until it ends.
type ptFlood struct {
	*tally
	ws   *websocket.Conn
	done chan struct{}
}

func startPtFlood(ws *websocket.Conn) *ptFlood {
	f := &ptFlood{tally: newTally(), ws: ws, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		defer f.end()
		for {
			_, r, err := ws.NextReader()
			var n int64
			if err == nil {
				n, err = readCount(r)
			}
			f.add(n)
			if err != nil {
				return
			}
		}
	}()
	return f
}

// stop closes the connection (the server kills the process) and waits for the reader.
func (f *ptFlood) stop() {
	f.ws.Close()
	<-f.done
}

var readBuf = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// readCount reads r to its end and returns the byte count.
func readCount(r io.Reader) (int64, error) {
	bp := readBuf.Get().(*[]byte)
	defer readBuf.Put(bp)
	var n int64
	for {
		m, err := r.Read(*bp)
		n += int64(m)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
	}
}
