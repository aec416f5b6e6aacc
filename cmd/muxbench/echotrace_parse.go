package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/muxterm/muxterm/proto"
)

// The echotrace section's analysis (echotrace.go runs it): an ftrace text trace (the `trace`
// file of tracefs with options/record-tgid set, events raw_syscalls:sys_enter/sys_exit and
// sched:*) cut into keystroke windows by muxbench's marker writes, and in each window the
// syscalls a keystroke's echo goes through.

// Markers: muxbench writes markerBase+kind*1000+i bytes to /dev/null just before a keystroke
// (an odd kind) and just after its echo came (kind+1); i is the keystroke's number modulo 1000.
// The trace finds each window by muxbench's write syscalls of that count.
const (
	markerBase = 100000
	markerMax  = markerBase + 10*1000 // exclusive
)

// Marker kinds, each the start of a window (the end is kind+1).
const (
	kindIdlePass = 1 // from idle, through the pass-through
	kindIdleLean = 3 // from idle, through the gateway with the lean client
	kindB2BGo    = 5 // back to back, through the gateway with the Go client
	kindB2BLean  = 7 // back to back, through the gateway with the lean client
)

// ftraceEvent is one line of an ftrace text trace, as far as echotrace needs it.
type ftraceEvent struct {
	comm  string
	tid   int
	tgid  int   // the tid when the trace has no tgid for it
	ns    int64 // the timestamp in nanoseconds
	event string
	nr    int       // syscall number (sys_enter, sys_exit)
	ret   int64     // sys_exit's return value
	args  [3]uint64 // sys_enter's first three arguments
}

// parseFtraceLine parses "comm-tid (tgid) [cpu] flags seconds: event: details"; the tgid is
// "-------" when ftrace has none recorded (then the tid stands for it). The comm may hold
// anything (dashes, spaces, parentheses: "(sd-pam)", "a (b)"), so the line is read from its
// "(tgid) [cpu]" field: the first ") [" whose parenthesis holds a tgid and whose bracket a
// CPU. It reports false for comment lines, lines of another shape, and timestamps that are
// not seconds with a decimal point (a raw counter clock such as x86-tsc). For sys_enter it
// parses "NR n (a0, a1, a2, …)" (hexadecimal arguments), for sys_exit "NR n = ret".
func parseFtraceLine(line string) (ftraceEvent, bool) {
	var e ftraceEvent
	if strings.HasPrefix(strings.TrimSpace(line), "#") {
		return e, false
	}
	open, closeP := -1, -1
	for from := 0; ; {
		k := strings.Index(line[from:], ") [")
		if k < 0 {
			return e, false
		}
		k += from
		from = k + 1
		o := strings.LastIndexByte(line[:k], '(')
		if o < 1 || line[o-1] != ' ' || !isTgidField(strings.TrimSpace(line[o+1:k])) {
			continue
		}
		if cpu, _, ok := strings.Cut(line[k+3:], "] "); !ok || !isDigits(cpu) {
			continue
		}
		open, closeP = o, k
		break
	}
	head := strings.TrimRight(line[:open], " ")
	dash := strings.LastIndexByte(head, '-')
	if dash < 0 {
		return e, false
	}
	tid, err := strconv.Atoi(head[dash+1:])
	if err != nil {
		return e, false
	}
	e.comm, e.tid = strings.TrimSpace(head[:dash]), tid
	if tg := strings.TrimSpace(line[open+1 : closeP]); tg == "-------" {
		e.tgid = tid
	} else if e.tgid, err = strconv.Atoi(tg); err != nil {
		return e, false
	}
	rest := line[closeP:]
	// "[cpu] flags seconds: event: details"
	f := strings.SplitN(strings.TrimLeft(rest[1:], " "), " ", 2)
	if len(f) != 2 || !strings.HasPrefix(f[0], "[") {
		return e, false
	}
	rest = strings.TrimLeft(f[1], " ")
	sp := strings.IndexByte(rest, ' ') // after the flags
	if sp < 0 {
		return e, false
	}
	rest = strings.TrimLeft(rest[sp:], " ")
	ts, rest, ok := strings.Cut(rest, ": ")
	if !ok {
		return e, false
	}
	if e.ns, ok = parseSeconds(ts); !ok {
		return e, false
	}
	e.event, rest, ok = strings.Cut(rest, ": ")
	if !ok {
		return e, false
	}
	switch e.event {
	case "sys_enter":
		nr, args, ok := strings.Cut(strings.TrimPrefix(rest, "NR "), " (")
		if !ok {
			return e, false
		}
		if e.nr, err = strconv.Atoi(nr); err != nil {
			return e, false
		}
		for i, a := range strings.SplitN(strings.TrimSuffix(args, ")"), ", ", 4) {
			if i == len(e.args) {
				break
			}
			if e.args[i], err = strconv.ParseUint(a, 16, 64); err != nil {
				return e, false
			}
		}
	case "sys_exit":
		nr, ret, ok := strings.Cut(strings.TrimPrefix(rest, "NR "), " = ")
		if !ok {
			return e, false
		}
		if e.nr, err = strconv.Atoi(nr); err != nil {
			return e, false
		}
		if e.ret, err = strconv.ParseInt(strings.TrimSpace(ret), 10, 64); err != nil {
			return e, false
		}
	}
	return e, true
}

// isTgidField reports whether s is a tgid column's content: a number, or "-------" (none).
func isTgidField(s string) bool {
	return s == "-------" || isDigits(s)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseSeconds reads "12345.678901" (one to nine decimals) as nanoseconds. A timestamp without
// a decimal point is a counter clock's raw count (x86-tsc, counter), not seconds: refused.
func parseSeconds(s string) (int64, bool) {
	whole, frac, ok := strings.Cut(s, ".")
	if !ok || !isDigits(whole) || !isDigits(frac) || len(frac) > 9 {
		return 0, false
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, false
	}
	f, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return 0, false
	}
	for range 9 - len(frac) {
		f *= 10
	}
	return w*1e9 + f, true
}

// parseLostLine reads the line ftrace puts where a CPU's ring buffer lost events: "CPU:1
// [LOST 42 EVENTS]", or "CPU:1 [LOST EVENTS]" when it does not know how many (n is then -1).
func parseLostLine(line string) (n int64, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "CPU:")
	if !ok {
		return 0, false
	}
	cpu, rest, ok := strings.Cut(rest, " [LOST ")
	if !ok || !isDigits(cpu) {
		return 0, false
	}
	if rest == "EVENTS]" {
		return -1, true
	}
	count, ok := strings.CutSuffix(rest, " EVENTS]")
	if !ok || !isDigits(count) {
		return 0, false
	}
	n, err := strconv.ParseInt(count, 10, 64)
	return n, err == nil
}

const (
	sysRead  = 0 // x86-64 syscall numbers
	sysWrite = 1
)

// traceWho names the processes of a traced run by tgid.
type traceWho struct {
	me   int          // muxbench: the client side and the markers
	pass int          // the pass-through
	gw   int          // the gateway
	cats map[int]bool // the cats that echo; empty: any process whose comm is cat
}

// server is the tgid that serves a window of kind.
func (w traceWho) server(kind int) int {
	if kind == kindIdlePass {
		return w.pass
	}
	return w.gw
}

func (w traceWho) isCat(e *ftraceEvent) bool {
	if len(w.cats) == 0 {
		return e.comm == "cat"
	}
	return w.cats[e.tgid]
}

// echoPoints names the points of a window, in order: each is the first event after the one
// before it that matches (echoPoint).
var echoPoints = []string{
	"client's socket write", // muxbench's write enter of the keystroke's frame (keystrokeWriteLen)
	"server's socket read",  // the server's first read exit with bytes: the keystroke arrived
	"server's PTY write",    // the server's next write enter: the keystroke to the PTY
	"cat's echo",            // cat's write exit: the echo is in the PTY
	"server's socket write", // the server's next write enter: the echo's frame
	"client's socket read",  // muxbench's next read exit with bytes: the echo arrived
}

// echoSegments names the intervals between a window's start marker, its points and its end
// marker.
var echoSegments = []string{
	"start → client's socket write",
	"client's write → server's socket read",
	"server's socket read → PTY write",
	"PTY write → cat's echo",
	"cat's echo → server's socket write",
	"server's socket write → client's read",
	"client's read → end",
}

// wsClientHeaderLen is the header of a client's WebSocket frame of fewer than 126 bytes: two
// bytes, then the 4-byte masking key (RFC 6455, 5.2: a client masks every frame).
const wsClientHeaderLen = 2 + 4

// keystrokeWriteLen is the length of the socket write that carries a window's keystroke (one
// byte): a WebSocket binary message of the byte itself to the pass-through, of a muxterm input
// frame (docs/protocol.md §2) to the gateway. The Go client writes other frames in a window
// too (its ackLoop acknowledges the previous echo: a 9-byte ack frame, a 15-byte write), so
// point 0 is the write of this length, not muxbench's first write.
func keystrokeWriteLen(kind int) uint64 {
	if kind == kindIdlePass {
		return wsClientHeaderLen + 1
	}
	return wsClientHeaderLen + proto.HeaderLen + 1
}

// echoPoint reports whether e is point p of a window of kind.
func (w traceWho) echoPoint(p, kind int, e *ftraceEvent) bool {
	srv := w.server(kind)
	switch p {
	case 0:
		return e.tgid == w.me && e.event == "sys_enter" && e.nr == sysWrite && e.args[2] == keystrokeWriteLen(kind)
	case 1:
		return e.tgid == srv && e.event == "sys_exit" && e.nr == sysRead && e.ret > 0
	case 2, 4:
		return e.tgid == srv && e.event == "sys_enter" && e.nr == sysWrite
	case 3:
		return w.isCat(e) && e.event == "sys_exit" && e.nr == sysWrite
	case 5:
		return e.tgid == w.me && e.event == "sys_exit" && e.nr == sysRead && e.ret > 0
	}
	return false
}

// echoKind is what the trace showed of one kind of window, in microseconds.
type echoKind struct {
	Windows  int         `json:"windows"`  // windows with both markers (not skipped)
	Complete int         `json:"complete"` // of those, the windows that had every point
	Total    []float64   `json:"-"`        // each window's length, marker to marker
	Segs     [][]float64 `json:"-"`        // per segment (echoSegments), the complete windows' values
}

// echoTraceResult is the analysis of one trace.
type echoTraceResult struct {
	Kinds map[int]*echoKind // by start marker kind
	// LostLines counts the trace's "CPU:N [LOST n EVENTS]" lines: there the ring buffer lost
	// events. LostEvents sums their n (a line without a count adds nothing); CutWindows counts
	// the windows such a line ended (not counted: a window with a hole cannot be trusted).
	LostLines  int   `json:"lost_lines"`
	LostEvents int64 `json:"lost_events"`
	CutWindows int   `json:"windows_cut_by_lost_events"`
}

// analyzeEchoTrace reads an ftrace text trace and measures every keystroke window in it.
// skip (if not nil) drops windows by kind and keystroke number (warm-up keystrokes); a window
// whose end marker never came (the run failed), or that a lost-events line cut, is not counted.
func analyzeEchoTrace(r io.Reader, who traceWho, skip func(kind, i int) bool) (echoTraceResult, error) {
	res := echoTraceResult{Kinds: map[int]*echoKind{}}
	type window struct {
		kind, i int
		t0      int64
		pts     []int64
	}
	var cur *window
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		e, ok := parseFtraceLine(sc.Text())
		if !ok {
			if n, lost := parseLostLine(sc.Text()); lost {
				res.LostLines++
				res.LostEvents += max(n, 0)
				if cur != nil {
					res.CutWindows++
					cur = nil
				}
			}
			continue
		}
		if e.tgid == who.me && e.event == "sys_enter" && e.nr == sysWrite && e.args[2] >= markerBase && e.args[2] < markerMax {
			kind, i := int(e.args[2]-markerBase)/1000, int(e.args[2]-markerBase)%1000
			switch {
			case kind%2 == 1:
				cur = &window{kind: kind, i: i, t0: e.ns}
			case cur != nil && kind == cur.kind+1 && i == cur.i:
				if skip == nil || !skip(cur.kind, cur.i) {
					k := res.Kinds[cur.kind]
					if k == nil {
						k = &echoKind{Segs: make([][]float64, len(echoSegments))}
						res.Kinds[cur.kind] = k
					}
					k.Windows++
					k.Total = append(k.Total, float64(e.ns-cur.t0)/1e3)
					if len(cur.pts) == len(echoPoints) {
						k.Complete++
						prev := cur.t0
						for j, t := range append(cur.pts, e.ns) {
							k.Segs[j] = append(k.Segs[j], float64(t-prev)/1e3)
							prev = t
						}
					}
				}
				cur = nil
			default:
				cur = nil // an end without its start: ignore both
			}
			continue
		}
		if cur != nil && len(cur.pts) < len(echoPoints) && who.echoPoint(len(cur.pts), cur.kind, &e) {
			cur.pts = append(cur.pts, e.ns)
		}
	}
	if err := sc.Err(); err != nil {
		return echoTraceResult{}, fmt.Errorf("read trace: %w", err)
	}
	return res, nil
}
