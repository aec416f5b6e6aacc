package upgrade

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/earlysignal"
)

// The signals a new image must survive while it starts: until the Go runtime installs its
// handlers they have their default action, which for each of these ends the process (and
// would orphan every session). Ignored across the exec instead, one that arrives then is lost,
// not fatal. Once the runtime runs, it keeps SIGINT ignored until internal/earlysignal
// registers for it and installs its own handler for the others: for SIGUSR2 a no-op until
// then, for SIGTERM its default action, which ends the process (docs/operations.md: the last
// 0.3–1.5 ms of the unguarded window, which no Go code can reach; blocking SIGTERM across the
// exec does not help, as the runtime unblocks it at its start).
var startupSignals = []syscall.Signal{syscall.SIGUSR2, syscall.SIGTERM, syscall.SIGINT}

// kernelSigaction is the kernel's struct sigaction on linux/amd64 and linux/arm64.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const sigIgn = 1 // SIG_IGN

// ignoreAcrossExec sets startupSignals to SIG_IGN at the kernel level, behind the Go runtime's
// back (os/signal.Ignore would also drop every Notify registration), and returns what puts the
// runtime's actions back should the exec fail.
func ignoreAcrossExec() (restore func()) {
	sigs := startupSignals
	if earlysignal.HangupIgnored {
		// Started under nohup: the new image must find SIGHUP ignored as this one did.
		sigs = append(sigs[:len(sigs):len(sigs)], syscall.SIGHUP)
	}
	saved := make([]kernelSigaction, len(sigs))
	set := make([]bool, len(sigs))
	for i, sig := range sigs {
		ign := kernelSigaction{handler: sigIgn}
		if rtSigaction(sig, &ign, &saved[i]) == nil {
			set[i] = true
		}
	}
	return func() {
		for i, sig := range sigs {
			if set[i] {
				_ = rtSigaction(sig, &saved[i], nil)
			}
		}
	}
}

func rtSigaction(sig syscall.Signal, act, old *kernelSigaction) error {
	_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(act)),
		uintptr(unsafe.Pointer(old)), unsafe.Sizeof(uint64(0)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
