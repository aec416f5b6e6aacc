package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/internal/upgrade"
)

// The gateway's part of an upgrade's dry run (internal/upgrade runs the upgrade in place): the
// configuration the new image would start with.

// handoverCheck runs the dry run when args start with --handover-check: it reports whether
// it can adopt the version named, and whether it handled args.
func handoverCheck(args []string, stdout io.Writer) (handled bool, code int) {
	return upgrade.HandoverCheck(args, stdout, version, checkConfig)
}

// checkConfig parses args as run would and loads the files run loads, without listening. The
// flag package's usage text is dropped: the error says what is wrong.
func checkConfig(args []string) error {
	c, err := parse(args, os.Getenv, io.Discard)
	if err != nil {
		return err
	}
	for _, f := range [][2]string{{"--tokens", c.sec.tokensFile}, {"--tls-cert", c.sec.tlsCert}, {"--tls-key", c.sec.tlsKey}} {
		if inheritedDescriptor(f[1]) {
			return fmt.Errorf("%s %s names a descriptor inherited at start, which an upgrade in place does not pass on; restart instead", f[0], f[1])
		}
	}
	if c.sec.tokensFile != "" {
		if _, err := gateway.LoadPrincipals(c.token, c.sec.tokensFile, slog.New(slog.DiscardHandler)); err != nil {
			return err
		}
	}
	if c.sec.tlsCert != "" {
		if _, err := tls.LoadX509KeyPair(c.sec.tlsCert, c.sec.tlsKey); err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
	}
	return nil
}

// inheritedDescriptor reports whether path names one of this process's descriptors.
func inheritedDescriptor(path string) bool {
	return strings.HasPrefix(path, "/dev/fd/") || strings.HasPrefix(path, "/proc/self/fd/")
}
