package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// explainDial turns a failed dial into a message that says what to do.
func (cfg *config) explainDial(err error) error {
	var de *client.DialError
	switch {
	case errors.As(err, &de) && de.Status == 401:
		return fmt.Errorf("the gateway at %s refused the token (from %s): check MUXTERM_TOKEN, --token or the token line of %s", cfg.url, cfg.tokenFrom, cfg.file)
	case errors.As(err, &de) && de.Status == 403:
		return fmt.Errorf("the gateway at %s refused the connection (HTTP 403: Host or Origin not allowed): use the address it listens on, or start it with --allow-host", cfg.url)
	case errors.As(err, &de) && de.Status == 429:
		return fmt.Errorf("the gateway at %s refused the connection (HTTP 429): this token already holds --max-sockets sockets", cfg.url)
	case errors.As(err, &de) && de.Status == 404:
		return fmt.Errorf("%s answered 404: the gateway's WebSocket path is /ws (check MUXTERM_URL or --url)", cfg.url)
	case errors.As(err, &de):
		return fmt.Errorf("the gateway at %s refused the connection: %w", cfg.url, err)
	case isConnRefused(err):
		return fmt.Errorf("no gateway at %s: start it with `make run` or set MUXTERM_URL (url from %s)", cfg.url, cfg.urlFrom)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer from %s within the timeout: is the gateway running there? (url from %s)", cfg.url, cfg.urlFrom)
	}
	var ne *net.OpError
	if errors.As(err, &ne) {
		return fmt.Errorf("cannot reach a gateway at %s (url from %s): %w", cfg.url, cfg.urlFrom, err)
	}
	return err
}

// rpcKind is the data.kind of a JSON-RPC error, or "".
func rpcKind(err error) string {
	var pe *proto.Error
	if errors.As(err, &pe) {
		return pe.Kind()
	}
	return ""
}

// resolveSession finds the session arg names: an id, else a unique name.
func resolveSession(ctx context.Context, c *client.Client, arg string) (proto.SessionInfo, error) {
	list, err := c.List(ctx)
	if err != nil {
		return proto.SessionInfo{}, fmt.Errorf("list sessions: %w", err)
	}
	var named []proto.SessionInfo
	for _, s := range list {
		if s.Session == arg {
			return s, nil
		}
		if s.Name == arg {
			named = append(named, s)
		}
	}
	switch len(named) {
	case 1:
		return named[0], nil
	case 0:
		return proto.SessionInfo{}, notFound(arg, list)
	}
	return proto.SessionInfo{}, fmt.Errorf("the name %q is ambiguous: %s; give the id", arg, describe(named))
}

// notFound says that no session is called arg, and which sessions there are.
func notFound(arg string, list []proto.SessionInfo) error {
	if len(list) == 0 {
		return fmt.Errorf("no session %q: there are no sessions (`muxterm new` starts one)", arg)
	}
	return fmt.Errorf("no session %q; the sessions are: %s", arg, describe(list))
}

// describe lists sessions as "id (name), id, ...".
func describe(list []proto.SessionInfo) string {
	parts := make([]string, len(list))
	for i, s := range list {
		parts[i] = s.Session
		if s.Name != "" {
			parts[i] += fmt.Sprintf(" (%s)", s.Name)
		}
	}
	return strings.Join(parts, ", ")
}

// explainOpen adds what to do to a refused session.open.
func explainOpen(err error, cmd []string) error {
	switch rpcKind(err) {
	case proto.KindForbidden:
		if len(cmd) > 0 {
			return fmt.Errorf("the gateway does not allow the command %q: start it with --allow-cmd %s (or --allow-cmd '*') (%w)", cmd[0], cmd[0], err)
		}
	case proto.KindSpawnFailed:
		return fmt.Errorf("the gateway could not start the command: %w", err)
	}
	return fmt.Errorf("open session: %w", err)
}
