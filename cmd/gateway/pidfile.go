package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// writePidFile writes this process's pid to path (--pid-file), atomically, mode 0644. An
// upgrade in place keeps the pid, so the new image writes the same number again.
func writePidFile(path string) error {
	if err := writeFileAtomic(path, strconv.Itoa(os.Getpid())+"\n", 0o644); err != nil {
		return fmt.Errorf("--pid-file %s: %w", path, err)
	}
	return nil
}

// removePidFile removes path if it still names this process: a file another gateway has
// written since is left alone.
func removePidFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--pid-file %s: %w", path, err)
	}
	if strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		return nil
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("--pid-file %s: %w", path, err)
	}
	return nil
}
