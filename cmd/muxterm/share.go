package main

import (
	"context"

	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/muxterm/muxterm/client"
)

// cmdShare: share ID|NAME [--ttl D] [--write] makes a link; share ls ID|NAME lists a session's
// links; share revoke SHARE... ends links (their open pages close).
func (a *app) cmdShare(args []string) error {
	if len(args) > 0 && (args[0] == "ls" || args[0] == "list") {
		return a.cmdShareLs(args[1:])
	}
	if len(args) > 0 && args[0] == "revoke" {
		return a.cmdShareRevoke(args[1:])
	}
	fs := a.flagSet("share")
	ttl := fs.Duration("ttl", time.Hour, "")
	write := fs.Bool("write", false, "")
	pos, err := a.parse(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"share needs one session id or name (or: share ls ID, share revoke SHARE)"}
	}
	if *ttl < time.Second || *ttl > 7*24*time.Hour {
		return usageError{fmt.Sprintf("--ttl %v: between 1s and 168h", *ttl)}
	}
	return a.withClient(func(ctx context.Context, c *client.Client) error {
		s, err := resolveSession(ctx, c, pos[0])
		if err != nil {
			return err
		}
		in, err := c.ShareCreate(ctx, s.Session, *ttl, *write)
		if err != nil {
			return fmt.Errorf("share %s: %w", s.Session, err)
		}
		mode := "read-only"
		if in.Write {
			mode = "read-write"
		}
		fmt.Fprintf(a.stdout, "%s\n", shareLink(a.cfg.url, in.Token))
		fmt.Fprintf(a.stderr, "muxterm: share %s of %s, %s, until %s (muxterm share revoke %s ends it)\n",
			visible(in.Share), visible(s.Session), mode, visible(in.Expires), visible(in.Share))
		return nil
	})
}

// shareLink is the page a link's token opens: the UI next to the socket's URL
// (ws://host/term/ws → http://host/term/), the token in the fragment, which browsers send to
// no server and keep out of logs.
func shareLink(wsURL, token string) string {
	u, err := url.Parse(wsURL)
	if err != nil {
		return "#share=" + token
	}
	u.Scheme = strings.Replace(u.Scheme, "ws", "http", 1)
	u.Path = strings.TrimSuffix(u.Path, "ws")
	u.RawQuery, u.Fragment = "", "share="+token
	return u.String()
}

func (a *app) cmdShareLs(args []string) error {
	fs := a.flagSet("share ls")
	pos, err := a.parse(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"share ls needs one session id or name"}
	}
	return a.withClient(func(ctx context.Context, c *client.Client) error {
		s, err := resolveSession(ctx, c, pos[0])
		if err != nil {
			return err
		}
		l, err := c.ShareList(ctx, s.Session)
		if err != nil {
			return fmt.Errorf("share ls %s: %w", s.Session, err)
		}
		fmt.Fprintf(a.stdout, "%-32s  %-10s  %-7s  %s\n", "SHARE", "MODE", "VIEWERS", "EXPIRES")
		for _, in := range l {
			mode := "read-only"
			if in.Write {
				mode = "read-write"
			}
			fmt.Fprintf(a.stdout, "%-32s  %-10s  %-7d  %s\n", visible(in.Share), mode, in.Viewers, visible(in.Expires))
		}
		return nil
	})
}

func (a *app) cmdShareRevoke(args []string) error {
	fs := a.flagSet("share revoke")
	pos, err := a.parse(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError{"share revoke needs a share id (muxterm share ls ID lists them)"}
	}
	return a.withClient(func(ctx context.Context, c *client.Client) error {
		for _, id := range pos {
			res, err := c.ShareRevoke(ctx, id)
			if err != nil {
				return fmt.Errorf("share revoke %s: %w", visible(id), err)
			}
			fmt.Fprintf(a.stdout, "revoked %s (%d open pages closed)\n", visible(res.Share), res.Closed)
		}
		return nil
	})
}
