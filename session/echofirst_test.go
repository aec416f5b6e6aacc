package session

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

type holdEvent struct {
	s    *Session
	held bool
}

// echoFirstOptions returns options with readers of their own whose holds and releases are
// reported on the channel, and the given EchoHold.
func echoFirstOptions(hold time.Duration) (Options, <-chan holdEvent) {
	o, rp, _ := ownPollers(testOptions())
	o.EchoHold = hold
	ev := make(chan holdEvent, 4096)
	rp.testHookEchoHold = func(s *Session, held bool) {
		select {
		case ev <- holdEvent{s, held}:
		default:
		}
	}
	return o, ev
}

// waitHoldEvent waits for s to be held (held true) or released, skipping other events.
func waitHoldEvent(t *testing.T, ev <-chan holdEvent, s *Session, held bool) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case e := <-ev:
			if e.s == s && e.held == held {
				return
			}
		case <-timer.C:
			t.Fatalf("session %s held=%v: no such event within 10s", s.ID(), held)
		}
	}
}

// waitCollected waits until c has collected more than n bytes.
func waitCollected(t *testing.T, c *collector, n int, what string) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for len(c.bytes()) <= n {
		select {
		case <-c.progress:
		case <-timer.C:
			t.Fatalf("%s: %d bytes collected, want more than %d within 10s", what, len(c.bytes()), n)
		}
	}
}

// streamAndTypist starts a session that streams (`yes`, collected) and one running script, whose
// viewer the test reads itself, both in one echo-first group (as one owner's sessions are); it
// waits for the stream to flow and for the typist's "R".
func streamAndTypist(t *testing.T, o Options, script string) (stream *Session, sc *collector, typist *Session, tv *Viewer, twake <-chan struct{}) {
	t.Helper()
	echo := new(echoGroup)
	stream = spawnGroupT(t, o, echo, "/bin/sh", "-c", "stty raw -echo; exec yes")
	swake, swakeFn := testutil.WakeChan()
	sv, _, err := stream.Subscribe(0, swakeFn)
	if err != nil {
		t.Fatal(err)
	}
	sc = collect(t, sv, swake, nil)
	typist = spawnGroupT(t, o, echo, "/bin/sh", "-c", "stty raw -echo; printf R; "+script)
	tv, wake := subscribeReady(t, typist)
	waitCollected(t, sc, 64<<10, "the stream before the keystroke")
	return stream, sc, typist, tv, wake
}

// subscribeReady subscribes to s, whose script prints R once its terminal is raw and echoes no
// more, and reads that R.
func subscribeReady(t *testing.T, s *Session) (*Viewer, <-chan struct{}) {
	t.Helper()
	wake, wakeFn := testutil.WakeChan()
	v, _, err := s.Subscribe(0, wakeFn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	if got := readViewer(t, v, wake, 1); got != "R" {
		t.Fatalf("first output of %s: %q, want R", s.ID(), got)
	}
	return v, wake
}

// readViewer reads v until it has n bytes, waiting on wake.
func readViewer(t *testing.T, v *Viewer, wake <-chan struct{}, n int) string {
	t.Helper()
	var got []byte
	buf := make([]byte, 64)
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for len(got) < n {
		m, _, err := v.Read(buf)
		if err != nil {
			t.Fatalf("read viewer: %v (after %q)", err, got)
		}
		got = append(got, buf[:m]...)
		if m > 0 {
			continue
		}
		select {
		case <-wake:
		case <-timer.C:
			t.Fatalf("viewer: %q within 10s, want %d bytes", got, n)
		}
	}
	return string(got)
}

// A keystroke holds another session's streaming output until a viewer reads the keystroke's
// echo: the stream's master is parked (its ring does not grow, even once the echo is in the
// typist's ring), Held says so to the socket writers, and reading the echo lets the stream go on.
func TestKeystrokeHoldsOtherOutputUntilItsEchoIsRead(t *testing.T) {
	t.Parallel()
	o, ev := echoFirstOptions(time.Minute) // the hold ends with the echo, not with the time
	stream, sc, typist, tv, twake := streamAndTypist(t, o, "exec cat")
	endR := typist.Info().End
	if _, err := typist.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	waitHoldEvent(t, ev, stream, true)
	held := stream.Info().End
	if !stream.Held() {
		t.Error("stream not Held while its master is held")
	}
	if typist.Held() {
		t.Error("the typist is Held for its own echo")
	}
	// The echo reaches the typist's ring (a reader ingested it) and still the stream is not read.
	for typist.Info().End == endR {
		select {
		case <-twake:
		case <-time.After(10 * time.Second):
			t.Fatal("no echo in the typist's ring within 10s")
		}
	}
	if end := stream.Info().End; end != held {
		t.Errorf("stream's ring grew from %d to %d while held for an echo nobody read", held, end)
	}
	if got := readViewer(t, tv, twake, 1); got != "x" {
		t.Fatalf("echo %q, want x", got)
	}
	waitHoldEvent(t, ev, stream, false)
	if stream.Held() {
		t.Error("stream still Held after the echo was read")
	}
	waitCollected(t, sc, int(held), "the stream after the echo was read")
}

// A keystroke that has no echo holds the other sessions for EchoHold only.
func TestKeystrokeWithoutEchoHoldsForEchoHold(t *testing.T) {
	t.Parallel()
	// Long enough that a worker takes the stream's master within it on a loaded machine (with
	// 20 ms it sometimes did not, and nothing was held); the release still comes from the timer.
	o, ev := echoFirstOptions(500 * time.Millisecond)
	stream, sc, typist, _, _ := streamAndTypist(t, o, "exec cat >/dev/null")
	if _, err := typist.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	waitHoldEvent(t, ev, stream, true)
	held := stream.Info().End
	waitHoldEvent(t, ev, stream, false) // by the timer: nothing is echoed
	waitCollected(t, sc, int(held), "the stream after the hold ended")
}

// Nothing is held while nobody types, by input longer than a keystroke (a paste), or with a
// negative EchoHold.
func TestNoHoldWithoutKeystroke(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		hold  time.Duration
		input string
	}{
		{"nobody types", time.Minute, ""},
		{"a paste", time.Minute, string(bytes.Repeat([]byte("p"), maxKeystroke+1))},
		{"EchoHold negative", -1, "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, ev := echoFirstOptions(tc.hold)
			stream, sc, typist, tv, twake := streamAndTypist(t, o, "exec cat")
			if tc.input != "" {
				if _, err := typist.Write([]byte(tc.input)); err != nil {
					t.Fatal(err)
				}
				// Leave the echo unread: a hold would last (a minute) until the stream stops.
				readViewer(t, tv, twake, 0)
			}
			from := stream.Info().End
			waitCollected(t, sc, int(from)+(1<<20), "the stream")
			select {
			case e := <-ev:
				t.Errorf("%s held=%v, want no hold (%s)", e.s.ID(), e.held, fmt.Sprint(tc.name))
			default:
			}
			if stream.Held() {
				t.Error("stream Held")
			}
		})
	}
}

// Keystrokes that keep coming without an echo do not stop another session's output for good:
// each time the hold ends, the held master reads at least a batch before it is held again.
func TestKeystrokesWithoutEchoDoNotStarveOthers(t *testing.T) {
	t.Parallel()
	o, ev := echoFirstOptions(20 * time.Millisecond)
	stream, _, typist, _, _ := streamAndTypist(t, o, "exec cat >/dev/null")
	stop := make(chan struct{})
	typing := make(chan struct{})
	go func() {
		defer close(typing)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := typist.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-typing }()
	// Held again and again, the stream still reads between two holds: its ring has grown each
	// time it is held again (the master is parked while held, so its end is read as it was).
	waitHoldEvent(t, ev, stream, true)
	last := stream.Info().End
	for i := range 5 {
		waitHoldEvent(t, ev, stream, false)
		waitHoldEvent(t, ev, stream, true)
		end := stream.Info().End
		if end <= last {
			t.Fatalf("hold %d: the stream's end %d, not past %d at the hold before: nothing read in between", i+2, end, last)
		}
		last = end
	}
}

// A keystroke holds only its owner's other sessions: alice's keystroke, whose echo nobody reads,
// holds alice's stream, while bob's stream (in the same registry, on the same readers) is never
// held and goes on filling its ring, a MiB of it, until the echo is read. The sessions are
// opened through a Registry, which puts each owner's sessions in the owner's group.
func TestKeystrokeHoldsOnlyItsOwnersSessions(t *testing.T) {
	t.Parallel()
	o, ev := echoFirstOptions(time.Minute) // the hold ends with the echo, not with the time
	r := NewRegistry(o, nil)
	stream := func(owner string) (*Session, *collector) {
		wake, wakeFn := testutil.WakeChan()
		s, v := openT(t, r, owner, wakeFn, "/bin/sh", "-c", "stty raw -echo; exec yes")
		return s, collect(t, v, wake, nil)
	}
	alice, ac := stream("alice")
	bob, bc := stream("bob")
	twake, twakeFn := testutil.WakeChan()
	typist, tv := openT(t, r, "alice", twakeFn, "/bin/sh", "-c", "stty raw -echo; printf R; exec cat")
	t.Cleanup(tv.Close)
	if got := readViewer(t, tv, twake, 1); got != "R" {
		t.Fatalf("typist's first output %q, want R", got)
	}
	waitCollected(t, ac, 64<<10, "alice's stream before the keystroke")
	waitCollected(t, bc, 64<<10, "bob's stream before the keystroke")
	if alice.echo != typist.echo || alice.echo == bob.echo {
		t.Fatal("the registry did not group the sessions by owner")
	}

	endR := typist.Info().End
	if _, err := typist.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	waitHoldEvent(t, ev, alice, true)
	held := alice.Info().End
	// The echo reaches the typist's ring and stays unread: alice's stream stays held.
	for typist.Info().End == endR {
		select {
		case <-twake:
		case <-time.After(10 * time.Second):
			t.Fatal("no echo in the typist's ring within 10s")
		}
	}
	if !alice.Held() {
		t.Error("alice's stream not Held while her echo is unread")
	}
	if bob.Held() {
		t.Error("bob's stream Held for alice's echo")
	}
	// Bob's stream is read on: a MiB more in his ring while alice's echo is unread.
	from := bob.Info().End
	waitCollected(t, bc, int(from)+(1<<20), "bob's stream while alice's echo is unread")
	if end := alice.Info().End; end != held {
		t.Errorf("alice's stream grew from %d to %d while held for her echo", held, end)
	}
	if !alice.Held() {
		t.Error("alice's stream no longer Held, her echo still unread")
	}
	for len(ev) > 0 {
		if e := <-ev; e.s == bob {
			t.Errorf("bob's stream held=%v for alice's keystroke", e.held)
		}
	}
	if got := readViewer(t, tv, twake, 1); got != "x" {
		t.Fatalf("echo %q, want x", got)
	}
	waitHoldEvent(t, ev, alice, false)
	waitCollected(t, ac, int(held), "alice's stream after her echo was read")
}

// A keystroke that comes after its session's reading ended (the program closed the PTY but runs
// on, so Write still takes input) leaves no mark on its group: no echo will ever be read for
// it, and a mark would make every later keystroke of the owner's hold the others until its
// timer instead of until its echo.
func TestKeystrokeAfterReadingEndedLeavesNoMark(t *testing.T) {
	t.Parallel()
	o, _ := echoFirstOptions(time.Minute)
	echo := new(echoGroup)
	s := spawnGroupT(t, o, echo, "/bin/sh", "-c", "exec sleep 60 </dev/null >/dev/null 2>&1")
	testutil.WaitClosed(t, s.readerDone, 10*time.Second, "reading of the session without a PTY")
	_, _ = s.Write([]byte("x")) // the master is closed: the write itself fails, the mark is made first
	if sinceEpoch() < echo.holdUntil.Load() {
		t.Error("the group's hold goes on after a keystroke to a session whose reading ended, want it ended")
	}
	if s.awaitingEcho.Load() {
		t.Error("session still awaits an echo")
	}
}

// A keystroke the program never echoes (a key vim takes silently, a password) does not make a
// later keystroke of the same owner's wait for EchoHold: the latest keystroke's echo ends the
// hold. (With a count of sessions awaiting an echo, the silent one kept it above zero.)
func TestLatestEchoEndsTheHold(t *testing.T) {
	t.Parallel()
	o, ev := echoFirstOptions(time.Hour)
	stream, sc, typist, tv, twake := streamAndTypist(t, o, "exec cat")
	silent := spawnGroupT(t, o, typist.echo, "/bin/sh", "-c", "stty raw -echo; printf R; exec cat >/dev/null")
	subscribeReady(t, silent) // its terminal echoes no more
	if _, err := silent.Write([]byte("s")); err != nil {
		t.Fatal(err)
	}
	if _, err := typist.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	waitHoldEvent(t, ev, stream, true)
	held := stream.Info().End
	if got := readViewer(t, tv, twake, 1); got != "x" {
		t.Fatalf("echo %q, want x", got)
	}
	// The hour's hold ends with the echo, although the silent keystroke has none.
	waitHoldEvent(t, ev, stream, false)
	waitCollected(t, sc, int(held), "the stream after the latest keystroke's echo")
}

// A session typed into while it is held for another session's echo is read on at once: its
// own echo does not wait for the other's (here: for an hour).
func TestKeystrokeIntoAHeldSessionReadsItOn(t *testing.T) {
	t.Parallel()
	o, ev := echoFirstOptions(time.Hour)
	stream, sc, typist, _, _ := streamAndTypist(t, o, "exec cat >/dev/null")
	if _, err := typist.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	waitHoldEvent(t, ev, stream, true)
	held := stream.Info().End
	if _, err := stream.Write([]byte("y")); err != nil { // Ctrl-C into the runaway stream, say
		t.Fatal(err)
	}
	waitCollected(t, sc, int(held)+1, "the held stream after a keystroke into it")
}
