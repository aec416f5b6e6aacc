package earlysignal

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// roleEnv makes the test binary act as the exec'ing old image ("exec") or the new image whose
// signal mask is read ("probe").
const roleEnv = "EARLYSIGNAL_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "exec":
		// As an upgrade would: block the stop signals and SIGUSR2 in the thread that execs.
		runtime.LockOSThread()
		var set unix.Sigset_t
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR2} {
			set.Val[(sig-1)/64] |= 1 << ((sig - 1) % 64)
		}
		if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil); err != nil {
			fmt.Println("sigmask:", err)
			os.Exit(1)
		}
		os.Setenv(roleEnv, "probe")
		env := os.Environ()
		err := syscall.Exec("/proc/self/exe", []string{os.Args[0]}, env)
		fmt.Println("exec:", err)
		os.Exit(1)
	case "probe":
		// The main thread's mask (the runtime's first thread, m0, runs package init).
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			fmt.Println("status:", err)
			os.Exit(1)
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "SigBlk:"); ok {
				fmt.Print(strings.TrimSpace(v))
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRuntimeUnblocksStopSignals pins down the Go runtime behaviour that leaves a stretch of a
// new image's start in which SIGTERM ends the process (docs/operations.md, "Upgrade and
// restart", Limits): an inherited signal mask is honoured for SIGUSR2, but the runtime
// unblocks SIGTERM and SIGINT on its first thread before it installs its handlers
// (runtime.blockableSig: signals whose default action kills are never left blocked). So an
// old image that blocked SIGTERM across the exec would not carry one to earlysignal's handler: a
// pending one is delivered at the runtime's start, with the disposition the exec left (SIG_IGN:
// lost; SIG_DFL: fatal). If this test fails, the runtime changed and the mask can be used.
func TestRuntimeUnblocksStopSignals(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"=exec")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	mask, err := strconv.ParseUint(string(out), 16, 64)
	if err != nil {
		t.Fatalf("helper printed %q: %v", out, err)
	}
	bit := func(sig syscall.Signal) bool { return mask&(1<<(sig-1)) != 0 }
	if !bit(syscall.SIGUSR2) {
		t.Errorf("SigBlk %016x: SIGUSR2 not blocked; the inherited mask did not reach the new image at all", mask)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		if bit(sig) {
			t.Errorf("SigBlk %016x: %v stayed blocked across the exec: the runtime now honours the mask for it", mask, sig)
		}
	}
}
