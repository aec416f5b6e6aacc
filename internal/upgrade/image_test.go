package upgrade

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestHoldImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "gateway")
	want := bytes.Repeat([]byte("image "), 50000)
	if err := os.WriteFile(bin, want, 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := holdImage(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	// What happens at the path from now on does not reach the copy.
	if err := os.WriteFile(bin+".new", []byte("truncated"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(img)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the held image: got %d bytes, want the %d bytes at the path when it was held",
			len(got), len(want))
	}
	seals, err := unix.FcntlInt(img.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		t.Fatal(err)
	}
	const all = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if seals&all != all {
		t.Fatalf("seals %#x, want %#x set", seals, all)
	}
	if _, err := img.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("a write into the held image succeeded")
	}
	if flags, err := unix.FcntlInt(img.Fd(), unix.F_GETFD, 0); err != nil ||
		flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("F_GETFD = %#x, %v; want close-on-exec", flags, err)
	}

	for _, tc := range []struct {
		name string
		make func(string) error
	}{
		{"not executable", func(p string) error { return os.WriteFile(p, want, 0o644) }},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o755) }},
		{"missing", func(string) error { return nil }},
	} {
		p := filepath.Join(dir, tc.name)
		if err := tc.make(p); err != nil {
			t.Fatal(err)
		}
		if img, err := holdImage(p); err == nil {
			img.Close()
			t.Errorf("%s: held, want an error", tc.name)
		}
	}
}

func TestRestoreComm(t *testing.T) {
	before := ownComm()
	if before == "" {
		t.Skip("no /proc/self/comm")
	}
	defer restoreComm(before)
	restoreComm("muxterm-test")
	if got := ownComm(); got != "muxterm-test" {
		t.Fatalf("comm after restoreComm: got %q, want %q", got, "muxterm-test")
	}
}
