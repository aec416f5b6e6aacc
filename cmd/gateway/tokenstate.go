package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/gateway"
)

// tokenStatePath is where a generated token is kept between starts:
// $XDG_STATE_HOME/muxterm/token, else ~/.local/state/muxterm/token (the XDG base directory
// specification's default). An XDG_STATE_HOME that is not absolute is ignored, as the
// specification says.
func tokenStatePath(getenv func(string) string) (string, error) {
	dir := getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(dir) {
		home := getenv("HOME")
		if home == "" {
			var err error
			if home, err = os.UserHomeDir(); err != nil {
				return "", fmt.Errorf("token state: neither XDG_STATE_HOME nor HOME is set: %w", err)
			}
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "muxterm", "token"), nil
}

// newToken is 24 random bytes in hex.
func newToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// keptToken returns the token kept at path, or, when there is none or renew is set, a new one
// it writes there (mode 0600, in a directory it creates with mode 0700). A kept file that
// others may read, or that holds no valid token, is an error naming what to do. When the new
// token cannot be written, it is returned with the write's error (keptErr): the gateway starts
// with it and says it will not survive a restart.
func keptToken(path string, renew bool) (tok string, keptErr, err error) {
	if !renew {
		tok, err := readKeptToken(path)
		if err == nil {
			return tok, nil, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", nil, err
		}
	}
	tok = newToken()
	return tok, writeKeptToken(path, tok), nil
}

// readKeptToken reads the token kept at path.
func readKeptToken(path string) (string, error) {
	// O_NONBLOCK: a FIFO put there is refused below, not waited on.
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token state %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("token state %s is not a regular file: remove it, or pass --new-token", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("token state %s may be read by others (mode %04o): chmod 600 it, or pass --new-token to replace it", path, perm)
	}
	b := make([]byte, 1024)
	n, err := f.Read(b)
	if err != nil {
		return "", fmt.Errorf("token state %s: %w (pass --new-token to replace it)", path, err)
	}
	tok := strings.TrimSpace(string(b[:n]))
	if err := gateway.ValidToken(tok); err != nil {
		return "", fmt.Errorf("token state %s: %w (pass --new-token to replace it)", path, err)
	}
	return tok, nil
}

// writeKeptToken writes tok to path atomically: a temporary file of mode 0600 beside it,
// synced, then renamed over it.
func writeKeptToken(path, tok string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("keep the token in %s: %w", path, err)
	}
	if err := writeFileAtomic(path, tok+"\n", 0o600); err != nil {
		return fmt.Errorf("keep the token in %s: %w", path, err)
	}
	return nil
}

// writeFileAtomic writes content to path with mode perm through a temporary file beside it,
// synced, then renamed over it: a reader sees the old content or the new, whole.
func writeFileAtomic(path, content string, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*") // mode 0600
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op after the rename
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.WriteString(content)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
