//go:build !windows

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// configDir makes $XDG_CONFIG_HOME/muxterm and returns the getenv that points there and the
// config file's path.
func configDir(t *testing.T) (func(string) string, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "muxterm", "config")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	return func(k string) string {
		if k == "XDG_CONFIG_HOME" {
			return dir
		}
		return ""
	}, path
}

// A config file that is a FIFO is refused at once, by its type, not read (which would wait for a
// writer for ever).
func TestConfigFileFIFORefused(t *testing.T) {
	getenv, path := configDir(t)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := resolveConfig("", "", getenv)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file (a FIFO)") {
			t.Fatalf("FIFO config: got %v, want a refusal naming the FIFO", err)
		}
	case <-time.After(5 * time.Second):
		// Unblock the open so that the goroutine ends.
		if w, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		<-done
		t.Fatal("reading a FIFO config file hung")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveConfig("", "", getenv); err == nil || !strings.Contains(err.Error(), "a directory") {
		t.Fatalf("directory config: got %v, want a refusal", err)
	}
}

// A key given twice is an error naming both lines, instead of the last one silently winning.
func TestConfigFileDuplicateKey(t *testing.T) {
	getenv, path := configDir(t)
	if err := os.WriteFile(path, []byte("token = a\n# comment\nurl = ws://h:1\ntoken = b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := resolveConfig("", "", getenv)
	if err == nil || !strings.Contains(err.Error(), "line 4: token is given again (first on line 1)") {
		t.Fatalf("duplicate token: got %v", err)
	}
}
