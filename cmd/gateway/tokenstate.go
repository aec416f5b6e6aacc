package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/internal/upgrade"
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

// resolveToken returns the token of principal default and whether the gateway generated it.
// With --token or --tokens it is --token's ("" without it), not generated. Otherwise it is
// generated: the token an upgrade in place handed over (ho), else the one kept in the user's
// state directory, or a new one kept there (keptToken); keptAt is where it is kept for the next
// start, "" for a handed-over token and for one that could not be kept (a warning says a
// restart makes a new one). The error is keptToken's: a kept token that cannot be used.
func resolveToken(c *config, ho *upgrade.State, getenv func(string) string,
	log *slog.Logger) (token string, generated bool, keptAt string, err error) {
	if c.token != "" || c.sec.tokensFile != "" {
		return c.token, false, "", nil
	}
	if ho != nil && ho.Token != "" {
		return ho.Token, true, "", nil
	}
	// The generated token survives restarts: kept in the user's state directory.
	path, err := tokenStatePath(getenv)
	keptErr := err
	if err == nil {
		if token, keptErr, err = keptToken(path, c.renewToken); err != nil {
			return "", false, "", err
		}
	}
	if token == "" {
		token = newToken()
	}
	if keptErr != nil {
		log.Warn("the generated token is not kept: a restart makes a new one", "err", keptErr)
	} else {
		keptAt = path
	}
	return token, true, keptAt, nil
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
