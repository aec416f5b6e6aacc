package cgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/procfs"
)

// DefaultName is the default root's name, a child of the gateway's own cgroup.
const DefaultName = "muxterm-sessions"

// instancePrefix starts the name of each gateway's directory under the root.
const instancePrefix = "gw-"

// Own returns the filesystem path of this process's cgroup v2 (from /proc/self/cgroup and the
// cgroup2 mount in /proc/self/mountinfo).
func Own() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("own cgroup: %w", err)
	}
	rel := ""
	found := false
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			rel, found = p, true
		}
	}
	if !found {
		return "", errors.New("own cgroup: no cgroup v2 entry in /proc/self/cgroup (cgroup v1 only)")
	}
	mnt, root, err := v2Mount()
	if err != nil {
		return "", err
	}
	if root != "/" {
		r, ok := strings.CutPrefix(rel, root)
		if !ok {
			return "", fmt.Errorf("own cgroup %s is outside the cgroup2 mount at %s (root %s)", rel, mnt, root)
		}
		rel = r
	}
	return filepath.Join(mnt, rel), nil
}

// v2Mount finds the first cgroup2 mount: its mount point and the cgroup it shows as its root.
func v2Mount() (mountPoint, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", fmt.Errorf("mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional fields] - fstype source ...
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		fields := strings.Fields(pre)
		if len(fields) < 5 {
			continue
		}
		return unescapeMount(fields[4]), unescapeMount(fields[3]), nil
	}
	if err := sc.Err(); err != nil {
		return "", "", fmt.Errorf("mountinfo: %w", err)
	}
	return "", "", errors.New("no cgroup2 filesystem is mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// DefaultRoot is DefaultName under the gateway's own cgroup.
func DefaultRoot() (string, error) {
	own, err := Own()
	if err != nil {
		return "", err
	}
	return filepath.Join(own, DefaultName), nil
}

// Tree is one gateway's directory under a root: the parent of its sessions' cgroups.
type Tree struct {
	root string
	dir  string
	// RemoveRoot makes Close also remove the root when it is empty (the default root, which
	// the gateway creates for itself).
	RemoveRoot bool
}

// Open makes (or, after a re-exec of the same process, finds) this process's directory under
// root, creating root if needed. It fails, saying why, when root is not on a cgroup v2
// filesystem, cannot be written, or the kernel has no cgroup.kill (before Linux 5.14).
func Open(root string) (*Tree, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("cgroup root %q: not an absolute path", root)
	}
	root = filepath.Clean(root)
	// Check the filesystem before creating anything: MkdirAll elsewhere would make plain dirs.
	probe := root
	for {
		if _, err := os.Stat(probe); err == nil {
			break
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			break
		}
		probe = parent
	}
	var st unix.Statfs_t
	if err := unix.Statfs(probe, &st); err != nil {
		return nil, fmt.Errorf("cgroup root %s: %w", root, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("cgroup root %s: %s is not on a cgroup v2 filesystem", root, probe)
	}
	name, err := instanceName(os.Getpid())
	if err != nil {
		return nil, err
	}
	t := &Tree{root: root, dir: filepath.Join(root, name)}
	for attempt := 0; ; attempt++ {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup root %s: %w", root, err)
		}
		err := os.Mkdir(t.dir, 0o755)
		if err == nil || errors.Is(err, fs.ErrExist) {
			break
		}
		// ENOENT: another gateway sharing the default root removed it on its way out, between
		// our two mkdirs. Make it again.
		if !errors.Is(err, fs.ErrNotExist) || attempt == 2 {
			return nil, fmt.Errorf("cgroup root %s: %w", root, err)
		}
	}
	if _, err := os.Stat(filepath.Join(t.dir, "cgroup.kill")); err != nil {
		_ = unix.Rmdir(t.dir)
		return nil, fmt.Errorf("cgroup root %s: no cgroup.kill (Linux 5.14 or later is needed): %w", root, err)
	}
	return t, nil
}

// Root returns the root the tree lives under.
func (t *Tree) Root() string { return t.root }

// Dir returns this gateway's directory.
func (t *Tree) Dir() string { return t.dir }

// NewGroup creates the cgroup name in t's directory and returns it with an fd on its directory
// for SysProcAttr.CgroupFD (the caller closes it).
func (t *Tree) NewGroup(name string) (Group, *os.File, error) {
	g := Group(filepath.Join(t.dir, name))
	if err := os.Mkdir(string(g), 0o755); err != nil {
		return "", nil, fmt.Errorf("create cgroup %s: %w", g, err)
	}
	f, err := os.OpenFile(string(g), os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		_ = unix.Rmdir(string(g))
		return "", nil, fmt.Errorf("open cgroup %s: %w", g, err)
	}
	return g, f, nil
}

// Sweep ends the directories that gateways no longer alive left under the root: every process
// in them is killed (cgroup.kill) and the cgroups are removed. It returns the processes ended
// and the session cgroups removed; a directory it could not remove is an error, after the rest
// was swept.
func (t *Tree) Sweep(ctx context.Context) (procs, groups int, err error) {
	entries, err := os.ReadDir(t.root)
	if err != nil {
		return 0, 0, fmt.Errorf("sweep %s: %w", t.root, err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), instancePrefix) {
			continue
		}
		dir := filepath.Join(t.root, e.Name())
		if dir == t.dir || instanceAlive(e.Name()) {
			continue
		}
		p, g, err := endTree(ctx, Group(dir))
		procs, groups = procs+p, groups+g
		if err != nil {
			errs = append(errs, err)
		}
	}
	return procs, groups, errors.Join(errs...)
}

// Close ends whatever is left in this gateway's directory (normally nothing: each session
// removed its cgroup), removes the directory, and the root too if RemoveRoot and it is empty.
// It returns the processes it had to kill.
func (t *Tree) Close(ctx context.Context) (procs int, err error) {
	procs, _, err = endTree(ctx, Group(t.dir))
	if err == nil && t.RemoveRoot {
		_ = unix.Rmdir(t.root) // EBUSY: another gateway uses it, or something else is there
	}
	return procs, err
}

// RemoveAll kills every process under the cgroup at path and removes it with its descendants
// (for tests and tools; a gateway uses Sweep and Close). It returns the processes it killed.
func RemoveAll(ctx context.Context, path string) (procs int, err error) {
	procs, _, err = endTree(ctx, Group(path))
	return procs, err
}

// endTree kills every process under g, removes g's descendants and then g. It returns the
// processes that were there and the cgroups removed below g.
func endTree(ctx context.Context, g Group) (procs, groups int, err error) {
	entries, err := os.ReadDir(string(g))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, 0, nil
		}
		return 0, 0, fmt.Errorf("end cgroup %s: %w", g, err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p, n, err := endTree(ctx, Group(filepath.Join(string(g), e.Name())))
		procs, groups = procs+p, groups+n+1
		if err != nil {
			errs = append(errs, err)
		}
	}
	if pids, _ := g.Procs(); len(pids) > 0 {
		procs += len(pids)
		if err := g.Kill(); err != nil {
			errs = append(errs, err)
		} else if _, err := g.WaitEmpty(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := g.Remove(ctx); err != nil {
		errs = append(errs, err)
	}
	return procs, groups, errors.Join(errs...)
}

// instanceName is this process's directory name: gw-<pid>-<start time in clock ticks since
// boot>, so a recycled pid is never taken for the gateway that died.
func instanceName(pid int) (string, error) {
	st, err := startTime(pid)
	if err != nil {
		return "", fmt.Errorf("cgroup instance name: %w", err)
	}
	return instancePrefix + strconv.Itoa(pid) + "-" + strconv.FormatUint(st, 10), nil
}

// instanceAlive reports whether the gateway a directory name stands for is still running. A
// name that does not parse is not ours to sweep: it counts as alive.
func instanceAlive(name string) bool {
	pidS, stS, ok := strings.Cut(strings.TrimPrefix(name, instancePrefix), "-")
	pid, err1 := strconv.Atoi(pidS)
	st, err2 := strconv.ParseUint(stS, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return true
	}
	now, err := startTime(pid)
	return err == nil && now == st
}

// startTime reads when pid started, in clock ticks since boot (field 22 of /proc/pid/stat). It
// does not change across execve, so a gateway that re-executes itself keeps its name.
func startTime(pid int) (uint64, error) {
	s, err := procfs.ReadStat(pid)
	if err != nil {
		return 0, err
	}
	return s.StartTime, nil
}

// Group is one cgroup, by its path.
type Group string

// Path returns the cgroup's directory.
func (g Group) Path() string { return string(g) }

// Kill writes 1 to cgroup.kill: SIGKILL to every process in g and below, including those
// forked while the kill runs.
func (g Group) Kill() error {
	if err := os.WriteFile(filepath.Join(string(g), "cgroup.kill"), []byte("1"), 0); err != nil {
		return fmt.Errorf("cgroup.kill %s: %w", g, err)
	}
	return nil
}

// Procs lists the pids in g's cgroup.procs (g itself, not its descendants).
func (g Group) Procs() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(string(g), "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("cgroup.procs %s: %w", g, err)
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// AllProcs lists the pids in g and in every cgroup below it (a session running as root may
// have made some).
func (g Group) AllProcs() ([]int, error) {
	pids, err := g.Procs()
	if err != nil {
		return nil, err
	}
	entries, _ := os.ReadDir(string(g))
	for _, e := range entries {
		if e.IsDir() {
			sub, _ := Group(filepath.Join(string(g), e.Name())).AllProcs()
			pids = append(pids, sub...)
		}
	}
	return pids, nil
}

// populated reads "populated" from cgroup.events (open as fd): some process is in g or below.
func (g Group) populated(fd int) (bool, error) {
	buf := make([]byte, 256)
	n, err := unix.Pread(fd, buf, 0)
	if err != nil {
		return false, fmt.Errorf("cgroup.events %s: %w", g, err)
	}
	for line := range strings.Lines(string(buf[:n])) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "populated "); ok {
			return v != "0", nil
		}
	}
	return false, fmt.Errorf("cgroup.events %s: no populated line", g)
}

// WaitEmpty waits until no process is left in g or below (cgroup.events says "populated 0";
// the kernel wakes a poll on it when that changes), or ctx ends. It returns the pids still in
// g or below at the end: none when it emptied.
func (g Group) WaitEmpty(ctx context.Context) ([]int, error) {
	// A raw fd, not an *os.File: the runtime poller has no business with a kernfs file.
	fd, err := unix.Open(filepath.Join(string(g), "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("wait for cgroup %s: %w", g, err)
	}
	defer unix.Close(fd)
	for {
		pop, err := g.populated(fd)
		if err != nil {
			return nil, err
		}
		if !pop {
			return nil, nil
		}
		ms := 100 // a re-read now and then, in case a wake-up was missed
		if dl, ok := ctx.Deadline(); ok {
			ms = min(ms, max(int(time.Until(dl)/time.Millisecond), 0))
		}
		if ctx.Err() != nil || ms == 0 {
			return g.AllProcs()
		}
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
		if _, err := unix.Poll(p, ms); err != nil && err != unix.EINTR {
			return nil, fmt.Errorf("wait for cgroup %s: poll: %w", g, err)
		}
	}
}

// Remove removes g, retrying while the kernel still counts exiting tasks in it (EBUSY), until
// ctx ends. A g already gone is not an error.
func (g Group) Remove(ctx context.Context) error {
	delay := time.Millisecond
	for {
		err := unix.Rmdir(string(g))
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("remove cgroup %s: %w", g, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			pids, _ := g.Procs()
			return fmt.Errorf("remove cgroup %s: still busy (%d processes): %w", g, len(pids), err)
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}
