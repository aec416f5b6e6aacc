package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/otel"

	"golang.org/x/sys/unix"
)

func sampleState() *HandoverState {
	e := ExitStatus{Code: 3}
	return &HandoverState{
		Taken: time.Unix(1700000000, 42).UTC(),
		Sessions: []HandedSession{
			{ID: "a", Owner: "alice", Name: "seq", Argv: []string{"sh", "-c", "seq 10"}, Pid: 100,
				Created: time.Unix(1700000000, 0).UTC(), Cols: 80, Rows: 24, PtsName: "/dev/pts/3",
				Master: 7, Pidfd: 8, RingStart: 5, Ring: []byte("\x00binary\xffring"),
				Holds: []HandedHold{{From: 6, UpTo: 9, Left: time.Second}}},
			{ID: "b", Owner: "bob", Pid: 101, Master: -1, Pidfd: -1, Exit: &e, OutputFinal: true},
		},
		Gone: []HandedTombstone{{ID: "c", Owner: "alice", Reason: ReasonKilled}},
	}
}

func encoded(t *testing.T, version uint32, st *HandoverState) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := EncodeHandover(&b, version, st); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestHandoverCodecRoundTrip(t *testing.T) {
	in := sampleState()
	var out HandoverState
	if err := DecodeHandover(encoded(t, HandoverVersion, in), HandoverVersion, &out); err != nil {
		t.Fatal(err)
	}
	if !out.Taken.Equal(in.Taken) || len(out.Sessions) != 2 || len(out.Gone) != 1 {
		t.Fatalf("decoded %+v, want %+v", out, in)
	}
	a, b := out.Sessions[0], out.Sessions[1]
	if a.ID != "a" || a.Owner != "alice" || !bytes.Equal(a.Ring, in.Sessions[0].Ring) || a.RingStart != 5 ||
		a.Master != 7 || a.Pidfd != 8 || len(a.Holds) != 1 || a.Holds[0] != in.Sessions[0].Holds[0] ||
		!a.Created.Equal(in.Sessions[0].Created) || a.Argv[2] != "seq 10" {
		t.Fatalf("session a decoded as %+v", a)
	}
	if b.Exit == nil || b.Exit.Code != 3 || b.Master != -1 || !b.OutputFinal {
		t.Fatalf("session b decoded as %+v", b)
	}
	if got := (&out).FDs(); len(got) != 2 || got[0] != 7 || got[1] != 8 {
		t.Fatalf("FDs() = %v, want [7 8]", got)
	}
}

func TestHandoverCodecRejects(t *testing.T) {
	good := encoded(t, HandoverVersion, sampleState())
	crc := func(b []byte) []byte { // the checksum byte flipped
		b = bytes.Clone(b)
		b[12] ^= 1
		return b
	}
	longer := binary.BigEndian.AppendUint64(bytes.Clone(good[:16]), uint64(len(good)-handoverHeaderLen+1))
	longer = append(longer, good[handoverHeaderLen:]...)
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrHandoverFormat},
		{"short header", good[:10], ErrHandoverFormat},
		{"bad magic", append([]byte("XXXXXXXX"), good[8:]...), ErrHandoverFormat},
		{"truncated payload", good[:len(good)-1], ErrHandoverLength},
		{"trailing bytes", append(bytes.Clone(good), 0), ErrHandoverLength},
		{"length says more", longer, ErrHandoverLength},
		{"wrong version", encoded(t, HandoverVersion+1, sampleState()), ErrHandoverVersion},
		{"checksum", crc(good), ErrHandoverFormat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out HandoverState
			err := DecodeHandover(tc.data, HandoverVersion, &out)
			if !errors.Is(err, tc.want) {
				t.Fatalf("DecodeHandover: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestHandoverMemfdRoundTrip(t *testing.T) {
	fd, err := WriteHandoverMemfd(HandoverVersion, sampleState())
	if err != nil {
		t.Fatal(err)
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("memfd flags %#x (%v): want close-on-exec", flags, err)
	}
	if _, err := unix.Write(fd, []byte("x")); err == nil {
		t.Fatal("wrote to a sealed memfd")
	}
	data, err := ReadHandoverFD(fd) // closes fd
	if err != nil {
		t.Fatal(err)
	}
	var out HandoverState
	if err := DecodeHandover(data, HandoverVersion, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Sessions) != 2 {
		t.Fatalf("decoded %d sessions, want 2", len(out.Sessions))
	}
}

// TestHandoverAdoptInProcess hands a live session from one registry to another in this
// process (what an exec does, minus the exec): the ring, offsets, hold and owner arrive, output
// the program wrote after the snapshot is read by the adopter, and the exit reaches it.
func TestHandoverAdoptInProcess(t *testing.T) {
	opts := testOptions()
	opts.ResumeHold = time.Minute
	r1 := NewRegistry(opts, nil)
	wake, w := testutil.WakeChan()
	s1, v1, err := r1.Open(Spec{Argv: []string{"sh", "-c", "stty raw -echo; echo ready; read x; echo got-$x; read y; exit 5"},
		Cols: 90, Rows: 30, Dir: os.TempDir(), Owner: "alice", Name: "handed"}, 0, w)
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, v1, wake, nil)
	c.waitOutput(t, "ready\n", 10*time.Second)
	v1.CloseHolding(0) // a socket lost: the hold must travel
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r1.Handover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r1.Open(Spec{Argv: []string{"true"}, Cols: 80, Rows: 24}, 0, nil); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("Open after Handover: %v, want ErrShuttingDown", err)
	}
	if len(st.Sessions) != 1 || st.Sessions[0].Master < 0 || st.Sessions[0].Pidfd < 0 {
		t.Fatalf("handed %+v", st.Sessions)
	}
	end1 := s1.Info().End
	// Input after the snapshot: the program answers into the PTY, which nobody reads now.
	if _, err := s1.Write([]byte("a\n")); err != nil {
		t.Fatal(err)
	}

	// The adopter gets a duplicate of the master, and s1's *os.File closes its own: across an
	// exec there is one descriptor, here two owners would close the same one.
	dup, err := unix.FcntlInt(uintptr(st.Sessions[0].Master), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	st.Sessions[0].Master = dup
	s1.ptmx.Close()

	r2 := NewRegistry(opts, nil)
	n, err := r2.Adopt(st)
	if err != nil || n != 1 {
		t.Fatalf("Adopt: %d, %v", n, err)
	}
	s2, err := r2.Get(s1.ID(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	cleanupSession(t, s2)
	// Echo first: the adopted session is in alice's group of the adopter, the one her sessions
	// opened there join, so her keystrokes hold it and no one else's do.
	r2.mu.Lock()
	alice, bob := r2.echoGroupLocked("alice"), r2.echoGroupLocked("bob")
	r2.mu.Unlock()
	if s2.echo != alice || s2.echo == bob {
		t.Error("the adopted session is not in its owner's echo group")
	}
	if in := s2.Info(); in.Pid != s1.Pid() || in.Name != "handed" || in.Cols != 90 || in.Rows != 30 || in.End < end1 {
		t.Fatalf("adopted %+v, pid want %d", in, s1.Pid())
	}
	s2.mu.Lock()
	holds := len(s2.holds)
	s2.mu.Unlock()
	if holds != 1 {
		t.Fatalf("adopted %d holds, want 1", holds)
	}
	wake2, w2 := testutil.WakeChan()
	v2, info, err := r2.Attach(s2.ID(), "alice", 0, w2)
	if err != nil || info.Offset != 0 || info.Lost != 0 {
		t.Fatalf("attach: %+v %v", info, err)
	}
	c2 := collect(t, v2, wake2, nil)
	c2.waitOutput(t, "ready\ngot-a\n", 10*time.Second)
	if _, err := s2.Write([]byte("b\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, s2.Exited(), 10*time.Second, "exit of the adopted session")
	if e, _ := s2.Exit(); e.Code != 5 {
		t.Fatalf("exit %+v, want code 5", e)
	}
	if got := c2.bytes(); !bytes.Equal(got, []byte("ready\ngot-a\n")) {
		t.Fatalf("adopted output %q", got)
	}
}

// TestEndStrays: after an adoption, the child of a session whose teardown had not finished is
// killed and reaped; a child of ours that is not in that list (a session's) is left alone.
func TestEndStrays(t *testing.T) {
	r := NewRegistry(testOptions(), nil)
	s, _ := openT(t, r, "alice", nil, "cat")
	stray := exec.Command("sh", "-c", "trap '' HUP TERM; while :; do sleep 1; done")
	stray.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	done, err := StartChild(stray) // forked as the gateway forks (see startHolder)
	if err != nil {
		t.Fatal(err)
	}
	pid := stray.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		done()
		// EndStrays reaps it, so Wait never runs: release the process's pidfd now, not when the
		// garbage collector gets to it in a later test that compares descriptors.
		_ = stray.Process.Release()
	})
	if n := r.EndStrays([]int{pid, 1}); n != 1 { // pid 1 is not our child: skipped
		t.Fatalf("EndStrays found %d strays, want 1", n)
	}
	testutil.WaitFor(t, 10*time.Second, "the stray to be killed and reaped", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return err != nil
	})
	if !testutil.Alive(s.Pid()) {
		t.Fatal("EndStrays killed a session's child")
	}
}

// TestResumeHandover: when the exec fails, the quiesced sessions go back to the readers and
// the waiter of the same image: output flows again and the exit is reaped.
func TestResumeHandover(t *testing.T) {
	r := NewRegistry(testOptions(), nil)
	wake, w := testutil.WakeChan()
	s, v := openT(t, r, "alice", w, "sh", "-c", "stty raw -echo; read x; echo got-$x; read y; exit 4")
	c := collect(t, v, wake, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r.Handover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("a\n")); err != nil {
		t.Fatal(err)
	}
	r.ResumeHandover(st)
	c.waitOutput(t, "got-a\n", 10*time.Second)
	other, _, err := r.Open(Spec{Argv: []string{"true"}, Cols: 80, Rows: 24, Dir: os.TempDir()}, 0, nil)
	if err != nil {
		t.Fatalf("Open after ResumeHandover: %v", err)
	}
	cleanupSession(t, other)
	if _, err := s.Write([]byte("b\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, s.Exited(), 10*time.Second, "exit after ResumeHandover")
	if e, _ := s.Exit(); e.Code != 4 {
		t.Fatalf("exit %+v, want code 4", e)
	}
}

// TestAdoptTearsDownABadSession: a handed session whose master is not a PTY master is not
// adopted: its child is killed and reaped (as a shutdown would), the error names it, and the
// other sessions are adopted.
func TestAdoptTearsDownABadSession(t *testing.T) {
	opts := testOptions()
	opts.KillGrace = 50 * time.Millisecond
	r1 := NewRegistry(opts, nil)
	good, _, err := r1.Open(Spec{Argv: []string{"cat"}, Cols: 80, Rows: 24, Dir: os.TempDir(), Owner: "a"}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad, _, err := r1.Open(Spec{Argv: []string{"sh", "-c", "trap '' HUP; exec sleep 100"}, Cols: 80, Rows: 24, Dir: os.TempDir(), Owner: "a"}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r1.Handover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	for i := range st.Sessions { // the adopter gets its own descriptors, as across an exec
		h := &st.Sessions[i]
		if h.ID == bad.ID() {
			h.Master, _ = unix.FcntlInt(devnull.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		} else {
			h.Master, _ = unix.FcntlInt(uintptr(h.Master), unix.F_DUPFD_CLOEXEC, 0)
		}
	}
	devnull.Close()
	good.ptmx.Close()
	bad.ptmx.Close()
	var evMu sync.Mutex // guards events
	events := map[string][]bool{}
	opts.Observer = func(e Event) {
		evMu.Lock()
		events[e.ID] = append(events[e.ID], e.Opened)
		evMu.Unlock()
	}
	r2 := NewRegistry(opts, nil)
	n, err := r2.Adopt(st)
	if n != 1 || err == nil || !strings.Contains(err.Error(), bad.ID()) {
		t.Fatalf("Adopt: %d adopted, err %v; want 1 and an error naming %s", n, err, bad.ID())
	}
	// The observer hears the good one added and the bad one removed (a cluster kept its entry
	// across the upgrade).
	evMu.Lock()
	gotGood, gotBad := fmt.Sprint(events[good.ID()]), fmt.Sprint(events[bad.ID()])
	evMu.Unlock()
	if gotGood != "[true]" || gotBad != "[false]" {
		t.Fatalf("observer: good %s, bad %s; want [true] and [false]", gotGood, gotBad)
	}
	g, err := r2.Get(good.ID(), "a")
	if err != nil {
		t.Fatal(err)
	}
	cleanupSession(t, g)
	testutil.WaitFor(t, 10*time.Second, "the bad session's child to be killed and reaped", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", bad.Pid()))
		return err != nil
	})
	if _, err := r2.Get(bad.ID(), "a"); err == nil {
		t.Fatal("the bad session was registered")
	}
}

// A handed session with neither a child to wait for nor a master to read is abandoned: no
// teardown will ever run for it, so its adoption itself ends its recording (whole, the exit
// marker in it, no longer listed as being written) and takes it out of the sessions' count.
func TestAdoptAbandonsASessionWithNothingLeft(t *testing.T) {
	opts := testOptions()
	opts.Record = RecordOptions{Dir: t.TempDir(), All: true}
	r1 := NewRegistry(opts, nil)
	s1, _, err := r1.Open(Spec{Argv: []string{"sh", "-c", "echo started; exec sleep 100"}, Cols: 80, Rows: 24,
		Dir: os.TempDir(), Owner: "a"}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the output in the recording", func() bool {
		data, _, err := r1.ReadRecording(s1.ID(), "a", false, 0, 1<<16)
		return err == nil && bytes.Contains(data, []byte(`"o", "started`))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r1.Handover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Sessions) != 1 || st.Sessions[0].Recording == "" {
		t.Fatalf("handed %+v, want the one session with its recording", st.Sessions)
	}
	h := &st.Sessions[0]
	// Its child is gone, reaped by someone else, and its pidfd was lost: nothing to wait for.
	// Its master is not a PTY: nothing to read.
	if err := unix.Kill(h.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Wait4(h.Pid, nil, 0, nil); err != nil && !errors.Is(err, unix.ECHILD) {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the child to be reaped", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", h.Pid))
		return err != nil
	})
	unix.Close(h.Pidfd)
	h.Pidfd = -1
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	h.Master, err = unix.FcntlInt(devnull.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	devnull.Close()
	if err != nil {
		t.Fatal(err)
	}
	// What the exec would close: the old image's master and its recording's file (the handover
	// wrote what it had queued).
	s1.ptmx.Close()
	if err := s1.rec.Close(ctx); err != nil {
		t.Fatal(err)
	}

	ended := make(chan struct{})
	opts2 := opts
	in, meter := newMeterProbe(t)
	opts2.Instruments = in
	opts2.Record.OnEnd = func(string, RecordingInfo) { close(ended) }
	r2 := NewRegistry(opts2, nil)
	n, err := r2.Adopt(st)
	if n != 0 || err == nil || !strings.Contains(err.Error(), s1.ID()) {
		t.Fatalf("Adopt: %d adopted, err %v; want 0 and an error naming %s", n, err, s1.ID())
	}
	if _, err := r2.Get(s1.ID(), "a"); err == nil {
		t.Fatal("the abandoned session was registered")
	}
	testutil.WaitClosed(t, ended, 10*time.Second, "the abandoned session's recording to end")
	list, err := r2.Recordings("a", false, s1.ID())
	if err != nil || len(list) != 1 || list[0].Active {
		t.Fatalf("recording list %+v, %v; want it, ended", list, err)
	}
	data, _, err := r2.ReadRecording(s1.ID(), "a", false, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(`"o", "started`)) || !bytes.HasSuffix(data, []byte(`"m", "exit -1"]`+"\n")) {
		t.Fatalf("recording does not hold the output then the exit marker:\n%s", data)
	}
	if got := meter.sum(t, otel.MetricSessions); got != 0 {
		t.Fatalf("sessions counted after the abandoned adoption: %v, want 0", got)
	}
}

// TestHandoverListsDyingSessions: a session whose teardown runs when the handover is taken is
// not handed over as a session but its child is listed in Dying, for the next image to end.
func TestHandoverListsDyingSessions(t *testing.T) {
	opts := testOptions()
	opts.KillGrace = 500 * time.Millisecond
	r := NewRegistry(opts, nil)
	wake, w := testutil.WakeChan()
	s, v := openT(t, r, "alice", w, "sh", "-c", "trap '' HUP TERM; echo ready; while :; do sleep 1; done")
	collect(t, v, wake, nil).waitOutput(t, "ready", 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		_, _ = r.Kill(ctx, s.ID(), "alice")
	}()
	testutil.WaitFor(t, 5*time.Second, "the kill to begin", func() bool { return s.State() != StateRunning })
	st, err := r.Handover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Sessions) != 0 || len(st.Dying) != 1 || st.Dying[0] != s.Pid() {
		t.Fatalf("handed %d sessions, dying %v; want none and [%d]", len(st.Sessions), st.Dying, s.Pid())
	}
	<-killed
}

// TestAdoptInParallel: many sessions adopted at once (Adopt's workers), a few of them with a
// master that is not a PTY: every good one is registered and reads its PTY again, every bad one
// is named in the error and its child killed and reaped, none is registered.
func TestAdoptInParallel(t *testing.T) {
	// Three adopters whatever the machine (Adopt runs GOMAXPROCS-1 of them).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	opts := testOptions()
	opts.KillGrace = 50 * time.Millisecond
	r1 := NewRegistry(opts, nil)
	const n, badEvery = 24, 6
	var ss []*Session
	for range n {
		s, _, err := r1.Open(Spec{Argv: []string{"cat"}, Cols: 80, Rows: 24, Dir: os.TempDir(), Owner: "a"}, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r1.Handover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]int{}
	for i := range st.Sessions { // the adopter gets its own descriptors, as across an exec
		h := &st.Sessions[i]
		if i%badEvery == 0 {
			bad[h.ID] = h.Pid
			h.Master, _ = unix.FcntlInt(devnull.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		} else {
			h.Master, _ = unix.FcntlInt(uintptr(h.Master), unix.F_DUPFD_CLOEXEC, 0)
		}
	}
	devnull.Close()
	for _, s := range ss {
		s.ptmx.Close()
	}
	r2 := NewRegistry(opts, nil)
	adopted, err := r2.Adopt(st)
	if adopted != n-len(bad) || err == nil {
		t.Fatalf("Adopt: %d adopted, err %v; want %d and an error", adopted, err, n-len(bad))
	}
	for id, pid := range bad {
		if !strings.Contains(err.Error(), id) {
			t.Errorf("the error does not name the bad session %s: %v", id, err)
		}
		if _, gerr := r2.Get(id, "a"); gerr == nil {
			t.Errorf("the bad session %s was registered", id)
		}
		testutil.WaitFor(t, 10*time.Second, "the bad session's child to be killed and reaped", func() bool {
			_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
			return err != nil
		})
	}
	if got := r2.Len(); got != n-len(bad) {
		t.Fatalf("registry holds %d sessions, want %d", got, n-len(bad))
	}
	for _, s1 := range ss {
		if _, isBad := bad[s1.ID()]; isBad {
			continue
		}
		s2, err := r2.Get(s1.ID(), "a")
		if err != nil {
			t.Fatal(err)
		}
		cleanupSession(t, s2)
		wake, w := testutil.WakeChan()
		v, _, err := r2.Attach(s2.ID(), "a", s2.Info().End, w)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s2.Write([]byte("ping-" + s2.ID() + "\n")); err != nil {
			t.Fatal(err)
		}
		collect(t, v, wake, nil).waitOutput(t, "ping-"+s2.ID(), 10*time.Second)
	}
}

// TestFailedHandoverUndoesItself: a Handover whose reader does not stop within its context (a
// worker held in its turn) fails and leaves the registry as it was: Open works, every session
// reads its PTY again (the held one too, once released), and a child's exit still reaches its
// session (it never left the waiter).
func TestFailedHandoverUndoesItself(t *testing.T) {
	opts := testOptions()
	hold := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	opts.testHookBeforeIngest = func(p []byte) {
		if bytes.Contains(p, []byte("stuck")) {
			once.Do(func() { close(entered) })
			<-hold
		}
	}
	r := NewRegistry(opts, nil)
	wake, w := testutil.WakeChan()
	stuck, v := openT(t, r, "alice", w, "sh", "-c", "stty raw -echo; echo stuck; read x; echo got-$x; read y; exit 6")
	c := collect(t, v, wake, nil)
	wake2, w2 := testutil.WakeChan()
	other, v2 := openT(t, r, "alice", w2, "sh", "-c", "stty raw -echo; read x; echo other-$x")
	c2 := collect(t, v2, wake2, nil)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader did not reach the hook")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := r.Handover(ctx); err == nil || !strings.Contains(err.Error(), stuck.ID()) {
		t.Fatalf("Handover with a reader held in its turn: %v, want an error naming %s", err, stuck.ID())
	}
	s3, _, err := r.Open(Spec{Argv: []string{"true"}, Cols: 80, Rows: 24, Dir: os.TempDir()}, 0, nil)
	if err != nil {
		t.Fatalf("Open after a failed Handover: %v", err)
	}
	cleanupSession(t, s3)
	if _, err := other.Write([]byte("b\n")); err != nil {
		t.Fatal(err)
	}
	c2.waitOutput(t, "other-b\n", 10*time.Second)
	close(hold)
	if _, err := stuck.Write([]byte("a\n")); err != nil {
		t.Fatal(err)
	}
	c.waitOutput(t, "stuck\ngot-a\n", 10*time.Second)
	if _, err := stuck.Write([]byte("y\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, stuck.Exited(), 10*time.Second, "exit after a failed Handover")
	if e, _ := stuck.Exit(); e.Code != 6 {
		t.Fatalf("exit %+v, want code 6", e)
	}
}

// TestHandoverSpentCtxStoppedReaders: readers that stop when Handover asks them (idle ones stop
// at once) pass a ctx that has already ended: only a reader that does not stop fails the
// quiesce, not a select that picks ctx.Done at random among ready cases.
func TestHandoverSpentCtxStoppedReaders(t *testing.T) {
	r := NewRegistry(testOptions(), nil)
	for range 8 {
		openT(t, r, "alice", func() {}, "cat") // no input, no output: the reader stays idle
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, err := r.Handover(ctx)
	if err != nil {
		t.Fatalf("Handover with a spent ctx and idle readers: %v", err)
	}
	if len(st.Sessions) != 8 {
		t.Fatalf("handed %d sessions, want 8", len(st.Sessions))
	}
	r.ResumeHandover(st)
}
