package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/muxterm/muxterm/internal/record"
	"github.com/muxterm/muxterm/session"
)

// recordConfig is the recording flags (docs/security.md, Recordings).
type recordConfig struct {
	dir       string
	onRequest bool
	input     bool
	maxAge    time.Duration
	maxBytes  byteSize
}

// pruneInterval is how often retention is enforced besides at start.
const pruneInterval = time.Hour

func (rc *recordConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&rc.dir, "record", "", "record every session in asciicast v2 into this `directory` (files mode 0600), or only those whose session.open asks with --record-on-request")
	fs.BoolVar(&rc.onRequest, "record-on-request", false, "with --record, record only the sessions whose session.open asks (record: true)")
	fs.BoolVar(&rc.input, "record-input", false, "with --record, record input too: everything typed, passwords included")
	fs.DurationVar(&rc.maxAge, "record-max-age", 0, "remove recordings older than this, at start and hourly (0: keep)")
	fs.Var(&rc.maxBytes, "record-max-bytes", "keep at most this many `bytes` of recordings, removing the oldest, at start and hourly (suffixes KiB, MiB, GiB; 0: no bound)")
}

func (rc *recordConfig) check() error {
	if rc.dir == "" {
		if rc.onRequest || rc.input || rc.maxAge != 0 || rc.maxBytes != 0 {
			return errors.New("--record-on-request, --record-input, --record-max-age and --record-max-bytes need --record")
		}
		return nil
	}
	if rc.maxAge < 0 || rc.maxBytes < 0 {
		return errors.New("--record-max-age and --record-max-bytes must not be negative")
	}
	abs, err := filepath.Abs(rc.dir)
	if err != nil {
		return fmt.Errorf("--record: %w", err)
	}
	rc.dir = abs // an upgrade in place or a changed working directory find the same files
	return nil
}

// options are the registry's RecordOptions.
func (rc *recordConfig) options() session.RecordOptions {
	return session.RecordOptions{Dir: rc.dir, All: !rc.onRequest, Input: rc.input,
		Retention: record.Retention{MaxAge: rc.maxAge, MaxBytes: int64(rc.maxBytes)}}
}

// prepare creates the directory (mode 0700) if it does not exist. One another user owns or may
// write into is refused (a file planted there could pose as a principal's recording); one other
// users may list is used with a warning (each recording is mode 0600 in any case).
func (rc *recordConfig) prepare(log *slog.Logger) error {
	if rc.dir == "" {
		return nil
	}
	if err := os.MkdirAll(rc.dir, 0o700); err != nil {
		return fmt.Errorf("--record: %w", err)
	}
	st, err := os.Stat(rc.dir)
	if err != nil {
		return fmt.Errorf("--record: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("--record %s: not a directory", rc.dir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("--record %s: owned by uid %d, not this user (%d): another user could plant recordings that claim a principal's name", rc.dir, sys.Uid, os.Geteuid())
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("--record %s: mode %v lets other users create files in it, which could pose as recordings: chmod go-w it", rc.dir, st.Mode().Perm())
	}
	if st.Mode().Perm()&0o055 != 0 {
		log.Warn("--record: other users can list the recordings (session ids; each file is mode 0600); chmod 700 the directory to hide them",
			"dir", rc.dir, "mode", st.Mode().Perm().String())
	}
	return nil
}

// keepPruned enforces retention now and every pruneInterval until ctx ends; the returned func
// stops it and waits.
func keepPruned(ctx context.Context, reg *session.Registry, log *slog.Logger) (stop func()) {
	prune := func() {
		p, err := reg.PruneRecordings(time.Now())
		if err != nil {
			log.Warn("recordings: retention", "err", err)
		}
		if p.Files > 0 {
			log.Info("recordings: removed by retention", "files", p.Files, "bytes", p.Bytes)
		}
	}
	prune()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(pruneInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				prune()
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
