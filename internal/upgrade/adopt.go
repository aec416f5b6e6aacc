package upgrade

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/internal/earlysignal"
	"github.com/muxterm/muxterm/session"
)

// The new image's side of an upgrade in place (upgrade.go is the old image's): reading the
// state, the listeners it hands over, serving behind the adoption gate, adopting, and the
// timeline of where the upgrade's time went.

// holdAdoption, when set to PATH (a FIFO; -X, as upgrade.go's knobs), makes this build, once it
// serves after an upgrade, open PATH for reading before it adopts the sessions: it waits there
// until a test opens the FIFO for writing. For the test of the adoption gate.
var holdAdoption = ""

// mark is one moment of the new image's start.
type mark struct {
	name string
	at   time.Time
}

// Mark records that the new image reached the step name (nothing when started fresh).
func (st *State) Mark(name string) {
	if st != nil {
		st.marks = append(st.marks, mark{name, time.Now()})
	}
}

// LogTimeline logs where the upgrade's time went, each step as the time since the one before
// (wall clock across the exec, monotonic after it): from the signal to the listeners' stop (the
// dry run), the quiesce (sockets closed, connections drained, sessions snapshotted), the exec
// (the state's encoding, the exec, the runtime's start up to internal/earlysignal's init), then
// each step the new image marked (Mark); no_accept is the window from the listeners' stop to
// the new image's Serve, in which connections wait in the backlog, adopted the time from the
// signal to the last step, and unguarded the window in which a stop signal is not caught: from
// the old image's SIG_IGN right before the exec to internal/earlysignal's init
// (docs/operations.md, Limits).
func (st *State) LogTimeline(log *slog.Logger) {
	if st == nil || st.Stopped.IsZero() || st.Quiesced.IsZero() {
		return
	}
	ms := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	attrs := []any{"stop", ms(st.Stopped.Sub(st.Signalled)),
		"quiesce", ms(st.Quiesced.Sub(st.Stopped)),
		"exec", ms(earlysignal.Started.Sub(st.Quiesced))}
	prev := earlysignal.Started
	var serving time.Time
	for _, m := range st.marks {
		attrs = append(attrs, m.name, ms(m.at.Sub(prev)))
		prev = m.at
		if m.name == "serve" {
			serving = m.at
		}
	}
	if !serving.IsZero() {
		attrs = append(attrs, "no_accept", ms(serving.Sub(st.Stopped)))
	}
	attrs = append(attrs, "adopted", ms(prev.Sub(st.Signalled)))
	if !ignoredAt.IsZero() {
		attrs = append(attrs, "unguarded", ms(earlysignal.Started.Sub(ignoredAt)))
	}
	log.Info("upgrade timeline", attrs...)
}

// TearDownUnlessAdopted is deferred by the gateway's run: if it fails after the state was read
// and before its sessions were adopted (a listener or a TLS key that no longer loads), the
// sessions' processes must not outlive this process: they are torn down as a shutdown would.
func (st *State) TearDownUnlessAdopted(log *slog.Logger, killGrace time.Duration) {
	if st == nil || st.adopted {
		return
	}
	ended := session.KillOrphans(log, killGrace)
	log.Error("upgrade: the new image could not start; the handed-over sessions were torn down",
		"ended", ended)
}

// StopRequested reports whether the previous image was asked to stop during the upgrade.
func (st *State) StopRequested(log *slog.Logger) bool {
	if st == nil || !st.Terminate {
		return false
	}
	log.Info("upgrade: a stop signal arrived during the upgrade; shutting down")
	st.Terminate = false // once
	return true
}

// Take reads and decodes the state the previous image handed over; nil when started
// fresh. A state that cannot be read is torn down as a shutdown would (every child of this
// process killed, every descriptor it carried closed) and reported as an error.
func Take(log *slog.Logger, killGrace time.Duration) (*State, error) {
	if inheritedErr != nil || inheritedFD < 0 {
		if inheritedErr == nil {
			return nil, nil
		}
		err := inheritedErr
		ended := session.KillOrphans(log, killGrace)
		log.Error("upgrade: handover state unreadable; previous sessions torn down",
			"err", err, "ended", ended)
		return nil, err
	}
	data, err := session.ReadHandoverFD(inheritedFD)
	st := &State{}
	if err == nil {
		err = session.DecodeHandover(data, handoverVersion(), st)
	}
	if err == nil && breakAdoption != "" {
		err = errors.New("adoption broken by this build " +
			"(-X github.com/muxterm/muxterm/internal/upgrade.breakAdoption)")
	}
	if err == nil && st.Sessions == nil {
		st.Sessions = &session.HandoverState{}
	}
	if err == nil {
		restoreComm(st.Comm) // image.go
	}
	if st.Image > 0 {
		unix.CloseOnExec(st.Image) // until ReleaseImage closes it
	}
	if err != nil {
		ended := session.KillOrphans(log, killGrace)
		log.Error("upgrade: handover state cannot be adopted; previous sessions torn down",
			"err", err, "ended", ended)
		return nil, fmt.Errorf("adopt handover state: %w", err)
	}
	return st, nil
}

// ReleaseImage closes the previous image's executable, kept open across the exec
// (State.Image).
func (st *State) ReleaseImage() {
	if st != nil && st.Image > 0 {
		unix.Close(st.Image)
		st.Image = 0
	}
}

// BinaryPath is the path the previous image read the binary from; "" when started fresh.
func (st *State) BinaryPath() string {
	if st == nil {
		return ""
	}
	return st.Binary
}

// ListenOrInherit returns the listener the previous image handed over under name, or a new
// one on addr, wrapped so an upgrade can stop it without closing its socket.
func ListenOrInherit(st *State, name, addr string) (*gateway.HandoverListener, error) {
	var ln net.Listener
	var err error
	if fd, ok := st.listener(name); ok {
		ln, err = gateway.InheritListener(fd)
	} else if ln, err = net.Listen("tcp", addr); err != nil {
		err = fmt.Errorf("listen %s: %w", addr, err)
		if errors.Is(err, unix.EADDRINUSE) && name == "main" {
			err = fmt.Errorf("%w: another process listens there (another gateway?); choose "+
				"another address with --listen (MUXTERM_LISTEN; make run: PORT=8300)", err)
		} else if errors.Is(err, unix.EADDRINUSE) {
			err = fmt.Errorf("%w: another process listens there; choose another address for "+
				"--%s-listen", err, name)
		}
	}
	if err != nil {
		return nil, err
	}
	hl, err := gateway.NewHandoverListener(ln)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return hl, nil
}

// listener takes the handed-over listener name out of st.
func (st *State) listener(name string) (int, bool) {
	if st == nil {
		return -1, false
	}
	fd, ok := st.Listeners[name]
	delete(st.Listeners, name)
	return fd, ok
}

// closeUnused closes handed-over listeners this image does not use (a flag removed).
func (st *State) closeUnused(log *slog.Logger) {
	for name, fd := range st.Listeners {
		log.Warn("upgrade: handed-over listener not used; closing it", "listener", name)
		unix.Close(fd)
	}
}

// adoptWait bounds how long a request that needs the sessions waits for their adoption.
const adoptWait = 30 * time.Second

// Gate returns h wrapped in an adoptionGate until the sessions are adopted, or h itself when
// started fresh.
func (st *State) Gate(h http.Handler) http.Handler {
	if st == nil {
		return h
	}
	st.ready = make(chan struct{})
	return &adoptionGate{next: h, ready: st.ready}
}

// adoptionGate lets a new image serve its listener before it has adopted the sessions, so that
// the time in which it accepts no connection ends with its setup instead of with the adoption
// (linear in the sessions): /healthz, /auth, the UI's files are answered at once, while a
// WebSocket upgrade (any path: the gateway refuses the wrong ones itself) and /readyz wait until
// every session is adopted (at most adoptWait, then 503), so that no client ever sees a registry
// without the sessions it resumes.
type adoptionGate struct {
	next  http.Handler
	ready chan struct{} // closed by State.OpenGate
}

func (g *adoptionGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if websocket.IsWebSocketUpgrade(r) || r.URL.Path == "/readyz" {
		select {
		case <-g.ready:
		default:
			t := time.NewTimer(adoptWait)
			defer t.Stop()
			select {
			case <-g.ready:
			case <-r.Context().Done():
				return
			case <-t.C:
				w.Header().Set("Connection", "close")
				http.Error(w, "adopting sessions after an upgrade; try again",
					http.StatusServiceUnavailable)
				return
			}
		}
	}
	g.next.ServeHTTP(w, r)
}

// HoldForTest waits on the FIFO holdAdoption names, in a build made for that test.
func HoldForTest(log *slog.Logger) {
	if holdAdoption == "" {
		return
	}
	log.Info("upgrade: adoption held until " + holdAdoption + " is opened (a test build)")
	if f, err := os.Open(holdAdoption); err == nil {
		f.Close()
	} else {
		log.Warn("upgrade: hold", "err", err)
	}
}

// OpenGate lets the requests the adoption gate holds through (once the sessions are adopted
// and the orphan reaper started).
func (st *State) OpenGate() {
	if st != nil && st.ready != nil {
		close(st.ready)
		st.ready = nil
	}
}

// Adopt registers the handed-over sessions and closes what this image does not use.
func Adopt(st *State, reg *session.Registry, log *slog.Logger) {
	st.adopted = true
	st.closeUnused(log)
	start := time.Now()
	n, err := reg.Adopt(st.Sessions)
	if err != nil {
		log.Error("upgrade: sessions not adopted (torn down)", "adopted", n, "err", err)
	}
	log.Info("upgrade: sessions adopted", "adopted", n, "handed", len(st.Sessions.Sessions),
		"took", time.Since(start).Round(time.Microsecond),
		"since_signal", time.Since(st.Signalled).Round(time.Microsecond))
	reg.EndStrays(st.Sessions.Dying)
	st.Sessions = nil // the rings' copies: run keeps st for as long as it runs
}
