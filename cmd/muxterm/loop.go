package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// maxPending bounds the input held while the socket is being redialled.
const maxPending = 64 << 10

// stopWait bounds what a stop signal (Ctrl-C, SIGTERM, SIGHUP) waits for: exec's kill, attach's
// detach. muxterm ends within it (and a little) however the gateway answers, or does not.
const stopWait = 750 * time.Millisecond

// loopOpts say how attach and exec differ.
type loopOpts struct {
	label     string     // "session ID" or "session ID (NAME)", for the last line
	keys      detachKeys // attach: the detach sequence (none for exec)
	stdin     io.Reader  // forwarded to the session, or nil
	eof       []byte     // exec --stdin: sent when stdin ends; nil: attach detaches then
	sizeFd    int        // a terminal whose size the session follows, or -1
	sentinel  bool       // write the sentinel after the replay and filter replies until answered
	replayEnd int64      // the offset where the replay ends
	exec      bool       // a stop signal kills the session, and so does the program's exit
	lf        bool       // exec --lf
	// pipes: exec without --tty; the session runs on pipes: its stderr goes to stderr, and its
	// stdin is closed when o.stdin ends (at once without --stdin).
	pipes bool
	// sigs: stop signals caught since before the session was opened (exec: one that arrives
	// between the open and the loop must still kill the session); nil: the loop catches them.
	sigs chan os.Signal
	// scr: attach on a terminal keeps a model of what it shows (screen.go); nil otherwise.
	scr *localScreen
}

// outcome is how a loop ended.
type outcome struct {
	code int
	line string // the last line for stderr, "" for none
}

// loop runs one binding (c, ch) of session id until it ends: output to stdout through a pump,
// input from o.stdin through the reply filter and the detacher, sizes from o.sizeFd, stop
// signals. It returns with the pump stopped and every client closed.
func (a *app) loop(c *client.Client, ch *client.Channel, id string, o loopOpts) outcome {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pump{cfg: a.cfg, id: id, out: a.stdout, events: make(chan event), done: make(chan struct{}),
		lf: o.lf, sentTo: -1, scr: o.scr}
	if o.pipes {
		p.errOut = a.stderr
	}
	var follow <-chan time.Time // a size can change while no output comes: look now and then
	if o.scr != nil {
		_ = o.scr.follow(a.stdout, ch, false) // before the pump writes: nothing holds the terminal
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		follow = t.C
	}
	filter := newReplyFilter(false)
	if o.sentinel && o.replayEnd > ch.Offset() {
		p.sentTo = o.replayEnd
		filter = newReplyFilter(true)
	}
	// cur is the binding the loop writes to; nil while the pump redials.
	cur, curC := ch, c
	// Sizes go out from a goroutine of their own, the latest first: the loop never waits for
	// a resize's answer, which a gateway that does not answer would make it wait 10 s for, deaf
	// to stop signals meanwhile.
	resizes, resized := make(chan sizeReq, 1), make(chan struct{})
	go func() {
		defer close(resized)
		for {
			select {
			case r := <-resizes:
				a.resize(ctx, r.ch, r.size)
			case <-ctx.Done():
				return
			}
		}
	}()
	resize := func(ch *client.Channel, size [2]int) {
		for {
			select {
			case resizes <- sizeReq{ch, size}:
				return
			default:
			}
			select {
			case <-resizes: // an older size nobody needs now
			default:
			}
		}
	}
	defer func() {
		cancel()
		if curC != nil {
			curC.Close()
		}
		<-p.done
		<-resized
	}()
	go p.run(ctx, c, ch)

	det := newDetacher(o.keys)
	var pending []byte
	send := func(b []byte) {
		if len(b) == 0 {
			return
		}
		if cur != nil {
			if _, err := cur.Write(b); err == nil {
				return
			}
		}
		if len(pending)+len(b) <= maxPending {
			pending = append(pending, b...)
		}
	}
	// stdinEnded: a pipe session's stdin is to be closed once the input before it is written;
	// sent again on each new binding (closing twice does nothing), so a drop cannot lose it.
	stdinEnded := false
	closeStdin := func() {
		stdinEnded = true
		if cur == nil {
			return // evBound sends it, after the pending input
		}
		ch := cur
		go func() {
			cctx, ccancel := context.WithTimeout(ctx, callTimeout)
			defer ccancel()
			_ = ch.CloseStdin(cctx) // a drop is retried on the next binding
		}()
	}
	var stdin chan []byte
	if o.stdin != nil {
		stdin = make(chan []byte)
		go readInput(ctx, o.stdin, stdin)
	} else if o.pipes {
		closeStdin() // no --stdin: the program reads the end of its input at once
	}
	sigs := o.sigs
	if sigs == nil {
		sigs = catchStopSignals()
	}
	defer signal.Stop(sigs)
	// A reader of stdout that leaves (| head) makes writes fail with EPIPE instead of killing
	// muxterm before it can remove exec's session or detach.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	sizes := make(chan [2]int, 1)
	var size [2]int
	if o.sizeFd >= 0 {
		if w, h, err := termSize(o.sizeFd); err == nil {
			size = [2]int{w, h}
			if o.scr != nil {
				o.scr.setLocal(w, h)
			}
			resize(cur, size)
		}
		watchSize(ctx, o.sizeFd, sizes)
	}
	var filterEnd <-chan time.Time
	// Before muxterm leaves (and the terminal goes back to cooked mode), the terminal's answers
	// to the queries it was shown must be consumed here: else the shell reads them as typed.
	defer func() {
		if stdin == nil || !filter.armed || filter.want < 0 {
			return
		}
		if filterEnd == nil {
			filterEnd = time.After(replyDeadline)
		}
		for filter.armed {
			select {
			case b, ok := <-stdin:
				if !ok {
					return
				}
				filter.feed(b)
			case <-filterEnd:
				return
			}
		}
	}()

	for {
		select {
		case b, ok := <-stdin:
			if !ok {
				stdin = nil
				if o.pipes {
					closeStdin()
					continue
				}
				if o.eof != nil {
					send(o.eof)
					continue
				}
				return a.detach(cur, o.label, "stdin ended")
			}
			b, stop := det.feed(filter.feed(b))
			send(b)
			if stop {
				return a.detach(cur, o.label, "")
			}
		case <-filterEnd:
			filterEnd = nil
			b, stop := det.feed(filter.disarm())
			send(b)
			if stop {
				return a.detach(cur, o.label, "")
			}
		case <-follow:
			_ = o.scr.follow(a.stdout, cur, true)
		case size = <-sizes:
			if o.scr != nil {
				o.scr.setLocal(size[0], size[1])
			}
			resize(cur, size)
		case sig := <-sigs:
			n := signalNumber(sig)
			if !o.exec {
				out := a.detachWithin(cur, o.label, "on "+sig.String(), stopWait)
				out.code = 128 + n
				return out
			}
			kctx, kcancel := context.WithTimeout(context.Background(), stopWait)
			_, err := curC.Kill(kctx, id)
			kcancel()
			if errors.Is(err, context.DeadlineExceeded) {
				return outcome{code: 128 + n, line: fmt.Sprintf("%s: sent the kill of %s; no answer within %v", sig, o.label, stopWait)}
			}
			if err != nil {
				return outcome{code: 128 + n, line: fmt.Sprintf("%s, and could not kill %s: %v", sig, o.label, err)}
			}
			return outcome{code: 128 + n, line: fmt.Sprintf("%s: killed %s", sig, o.label)}
		case ev := <-p.events:
			switch ev.kind {
			case evLost:
				cur = nil
			case evBound:
				curC.Close()
				cur, curC = ev.ch, ev.c
				if o.sizeFd >= 0 {
					resize(cur, size)
				}
				b := pending
				pending = nil
				send(b)
				if stdinEnded {
					closeStdin()
				}
			case evSentinel:
				filter.sentinelSent(ev.queries)
				if filter.armed {
					filterEnd = time.After(replyDeadline)
				}
			case evEnd:
				return a.ended(curC, id, o, ev)
			}
		}
	}
}

// ended reports a binding that ended without a detach.
func (a *app) ended(c *client.Client, id string, o loopOpts, ev event) outcome {
	// exec's session ends with exec, however exec ends.
	if o.exec && ev.reason == "" {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if _, err := c.Kill(ctx, id); err != nil && rpcKind(err) != proto.KindUnknownSession {
			fmt.Fprintln(a.stderr, "muxterm:", visibleLines(fmt.Sprintf("remove %s: %v", o.label, err)))
		}
	}
	switch {
	case errors.Is(ev.err, syscall.EPIPE):
		return outcome{code: 128 + 13} // stdout's reader left (| head): as if killed by SIGPIPE
	case ev.err != nil:
		return outcome{code: 1, line: fmt.Sprintf("%s: %v", o.label, ev.err)}
	case ev.exit != nil && o.exec:
		return outcome{code: exitCode(ev.exit)}
	case ev.exit != nil:
		return outcome{code: exitCode(ev.exit), line: fmt.Sprintf("%s %s", o.label, describeExit(ev.exit))}
	case ev.reason != "":
		return outcome{code: 1, line: fmt.Sprintf("%s was closed by the gateway (%s)", o.label, ev.reason)}
	}
	return outcome{code: 1, line: fmt.Sprintf("%s: the binding ended", o.label)}
}

// detach detaches from the session, which keeps running.
func (a *app) detach(ch *client.Channel, label, why string) outcome {
	return a.detachWithin(ch, label, why, callTimeout)
}

// detachWithin is detach that waits at most wait for the gateway's answer.
func (a *app) detachWithin(ch *client.Channel, label, why string, wait time.Duration) outcome {
	if ch != nil {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = ch.Detach(ctx)
	}
	line := "detached from " + label
	if why != "" {
		line += " (" + why + ")"
	}
	return outcome{code: 0, line: line}
}

// sizeReq is a size for a binding's session.
type sizeReq struct {
	ch   *client.Channel
	size [2]int
}

// resize sends the size, if there is a binding; a refusal (a read-only token) is ignored.
func (a *app) resize(ctx context.Context, ch *client.Channel, size [2]int) {
	if ch == nil || size[0] <= 0 || size[1] <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_ = ch.Resize(ctx, size[0], size[1])
}

// readInput sends what r gives on out, and closes out at EOF or an error.
func readInput(ctx context.Context, r io.Reader, out chan<- []byte) {
	defer close(out)
	for {
		b := make([]byte, 4096)
		n, err := r.Read(b)
		if n > 0 {
			select {
			case out <- b[:n]:
			case <-ctx.Done():
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// sendLatest replaces what out holds with v (out has capacity 1).
func sendLatest(out chan [2]int, v [2]int) {
	for {
		select {
		case out <- v:
			return
		default:
		}
		select {
		case <-out:
		default:
		}
	}
}

// exitCode is the shell's code for an exit: the code, or 128 + the signal's number.
func exitCode(e *proto.ExitInfo) int {
	if e.Signal != nil {
		if n := signalNumbers[*e.Signal]; n > 0 {
			return 128 + n
		}
		return 1
	}
	if e.Code < 0 || e.Code > 255 {
		return 1
	}
	return e.Code
}

func describeExit(e *proto.ExitInfo) string {
	if e.Signal != nil {
		return fmt.Sprintf("ended by signal %s (exit code %d)", *e.Signal, exitCode(e))
	}
	return fmt.Sprintf("exited with code %d", e.Code)
}

// signalNumbers are Linux's numbers, where the gateway runs its sessions.
var signalNumbers = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8, "KILL": 9,
	"USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15, "STKFLT": 16,
	"CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22, "URG": 23,
	"XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29, "PWR": 30, "SYS": 31,
}

// signalNumber is a local stop signal's conventional number.
func signalNumber(s os.Signal) int {
	switch s {
	case os.Interrupt:
		return 2
	case syscall.SIGTERM:
		return 15
	}
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 1
}

// catchStopSignals starts catching the stop signals (Ctrl-C, SIGTERM, SIGHUP) on a channel
// that keeps the first until it is read.
func catchStopSignals() chan os.Signal {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSignals...)
	return sigs
}
