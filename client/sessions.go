package client

import (
	"cmp"
	"context"
	"io"
	"time"

	"github.com/muxterm/muxterm/proto"
)

// OpenOptions are session.open's params other than the channel.
type OpenOptions struct {
	Cmd  []string
	Cwd  string
	Env  map[string]string
	Cols int
	Rows int
	Name string
	// Record asks for a recording of the session (a gateway started with --record
	// --record-on-request; with --record alone every session is recorded anyway).
	Record bool
	// Pipes runs the program without a terminal (session.open's tty false): its stdin, stdout
	// and stderr are pipes, Channel.ReadStream tells stderr from stdout, and Channel.CloseStdin
	// ends its input. Cols and Rows may then be 0.
	Pipes bool
}

// params are session.open's params for o on channel.
func (o OpenOptions) params(channel uint32) proto.OpenParams {
	p := proto.OpenParams{Channel: channel, Cmd: o.Cmd, Cwd: o.Cwd, Env: o.Env, Cols: o.Cols, Rows: o.Rows, Name: o.Name, Record: o.Record}
	if o.Pipes {
		p.TTY = new(bool) // false
	}
	return p
}

// Open starts a session and returns its channel. If ctx ends after the request went out, a
// session the gateway opens anyway is killed when its result arrives, and the channel number
// stays reserved until then.
func (c *Client) Open(ctx context.Context, o OpenOptions) (*Channel, error) {
	ch := c.newChannel()
	err, handedOff := c.callLate(ctx, proto.MethodSessionOpen, o.params(ch.ID), nil, ch.bindOpenSized(o), c.undo(ch, proto.MethodSessionKill))
	if err != nil {
		if !handedOff {
			c.dropChannel(ch)
		}
		return nil, err
	}
	return ch, nil
}

// AttachOptions are session.attach's params other than the channel and the session.
type AttachOptions struct {
	// From is the offset to replay from; nil means the oldest retained byte.
	From *int64
	// Cols and Rows declare this viewer's size (both or neither): with the gateway's
	// --window-size policy they may size the session (docs/protocol.md §3).
	Cols, Rows int
	// Screen is proto.ScreenAuto (also when empty), proto.ScreenAlways or proto.ScreenNever:
	// whether the channel starts with a paint of the session's screen (docs/protocol.md §4
	// session.attach). The paint's bytes are read from the channel first; they have no offsets.
	Screen string
	// ResumeScreen is the screen mode of the re-attach after a reconnect: empty for Screen's
	// (and a whole paint whatever Screen says when a paint was cut short by the drop);
	// proto.ScreenNever keeps the channel a byte stream across reconnects, with gaps for what
	// the ring lost, as a relay that forwards bytes needs.
	ResumeScreen string
}

// Attach binds a new channel to session id, replaying from from (nil: the oldest retained byte).
func (c *Client) Attach(ctx context.Context, id string, from *int64) (*Channel, proto.AttachResult, error) {
	return c.AttachWith(ctx, id, AttachOptions{From: from})
}

// AttachWith is Attach with every option. If ctx ends after the request went out, a binding
// the gateway makes anyway is detached when its result arrives, and the channel number stays
// reserved until then.
func (c *Client) AttachWith(ctx context.Context, id string, o AttachOptions) (*Channel, proto.AttachResult, error) {
	ch := c.newChannel()
	params := proto.AttachParams{Channel: ch.ID, Session: id, From: o.From, Cols: o.Cols, Rows: o.Rows, Screen: o.Screen}
	var res proto.AttachResult
	err, handedOff := c.callLate(ctx, proto.MethodSessionAttach, params, &res, ch.bindAttach(o.From, cmp.Or(o.ResumeScreen, o.Screen)), c.undo(ch, proto.MethodSessionDetach))
	if err != nil {
		if !handedOff {
			c.dropChannel(ch)
		}
		return nil, res, err
	}
	return ch, res, nil
}

// undo returns the late handler of an open or attach whose caller gave up: if the gateway bound
// ch after all, method (proto.MethodSessionKill for an open, proto.MethodSessionDetach for an attach) undoes it;
// then ch's number is free again. It runs on the reader goroutine, so the request goes out from
// a goroutine of its own, bounded by WriteTimeout.
func (c *Client) undo(ch *Channel, method string) func(response) {
	return func(r response) {
		if r.Err != nil || r.lost != nil {
			c.dropChannel(ch)
			ch.end(io.EOF)
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), c.opts.WriteTimeout)
			defer cancel()
			var params any = proto.DetachParams{Channel: ch.ID}
			if method == proto.MethodSessionKill {
				params = proto.KillParams{Session: ch.Session()}
			}
			_ = c.Call(ctx, method, params, nil)
			c.dropChannel(ch)
			ch.end(io.EOF)
		}()
	}
}

// Kill kills session id.
func (c *Client) Kill(ctx context.Context, id string) (proto.KillResult, error) {
	var res proto.KillResult
	err := c.Call(ctx, proto.MethodSessionKill, proto.KillParams{Session: id}, &res)
	return res, err
}

// CaptureOptions are session.capture's params other than the session.
type CaptureOptions struct {
	// ANSI asks for a paint of the screen instead of its text.
	ANSI bool
	// Scrollback is the lines of history above the screen to include.
	Scrollback int
}

// Capture returns what is on session id's screen (docs/protocol.md §4 session.capture).
func (c *Client) Capture(ctx context.Context, id string, o CaptureOptions) (proto.CaptureResult, error) {
	params := proto.CaptureParams{Session: id, Format: proto.CaptureText, Scrollback: max(o.Scrollback, 0)}
	if o.ANSI {
		params.Format = proto.CaptureANSI
	}
	var res proto.CaptureResult
	err := c.Call(ctx, proto.MethodSessionCapture, params, &res)
	return res, err
}

// List lists the caller's sessions.
func (c *Client) List(ctx context.Context) ([]proto.SessionInfo, error) {
	var res proto.ListResult
	err := c.Call(ctx, proto.MethodSessionList, proto.ListParams{}, &res)
	return res.Sessions, err
}

// ShareCreate makes a share link to one of the caller's sessions for ttl: read-only unless
// write. The result holds the link's token, which no later answer shows again.
func (c *Client) ShareCreate(ctx context.Context, session string, ttl time.Duration, write bool) (proto.ShareInfo, error) {
	var res proto.ShareInfo
	err := c.Call(ctx, proto.MethodShareCreate, proto.ShareCreateParams{Session: session, TTLMs: ttl.Milliseconds(), Write: write}, &res)
	return res, err
}

// ShareList lists the live share links to one of the caller's sessions.
func (c *Client) ShareList(ctx context.Context, session string) ([]proto.ShareInfo, error) {
	var res proto.ShareListResult
	err := c.Call(ctx, proto.MethodShareList, proto.ShareListParams{Session: session}, &res)
	return res.Shares, err
}

// ShareRevoke ends a share link of the caller's; the sockets open with it close (4003).
func (c *Client) ShareRevoke(ctx context.Context, share string) (proto.ShareRevokeResult, error) {
	var res proto.ShareRevokeResult
	err := c.Call(ctx, proto.MethodShareRevoke, proto.ShareRevokeParams{Share: share}, &res)
	return res, err
}
