//go:build e2e

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/proto"
)

// TestShareLinks: a read-only link's socket sees only its session, receives its output and
// can neither type, resize, open, kill nor make links; a read-write link's socket types; links
// are listed per session with their open sockets; a revocation closes the sockets open with
// the link at once, an expiry too, and neither link then authenticates.
func TestShareLinks(t *testing.T) {
	g := startGateway(t)
	ctx := ctxT(t, 60*time.Second)
	owner := g.dial(t)
	shared, err := owner.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	other, err := owner.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := owner.ShareCreate(ctx, shared.Session(), time.Minute, false)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := owner.ShareCreate(ctx, shared.Session(), time.Minute, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ro.Token) < 32 || ro.Session != shared.Session() || ro.Write || !rw.Write {
		t.Fatalf("share.create: %+v, %+v", ro, rw)
	}

	viewer, err := client.Dial(ctx, g.WS, client.DialOptions{Token: ro.Token})
	if err != nil {
		t.Fatalf("dial with the read-only link's token: %v", err)
	}
	l, err := viewer.List(ctx)
	if err != nil || len(l) != 1 || l[0].Session != shared.Session() {
		t.Fatalf("the link's socket lists %+v (%v), want only %s", l, err, shared.Session())
	}
	if _, _, err := viewer.Attach(ctx, other.Session(), nil); kindOf(t, err) != proto.KindUnknownSession {
		t.Errorf("attach to another session through the link: %v, want unknown_session", err)
	}
	if _, err := viewer.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24}); kindOf(t, err) != proto.KindForbidden {
		t.Errorf("open through the link: %v, want forbidden", err)
	}
	if _, err := viewer.Kill(ctx, shared.Session()); kindOf(t, err) != proto.KindForbidden {
		t.Errorf("kill through the link: %v, want forbidden", err)
	}
	if _, err := viewer.ShareCreate(ctx, shared.Session(), time.Minute, true); kindOf(t, err) != proto.KindForbidden {
		t.Errorf("share.create through the link: %v, want forbidden", err)
	}
	vch, _, err := viewer.Attach(ctx, shared.Session(), nil)
	if err != nil {
		t.Fatalf("attach through the link: %v", err)
	}
	if err := vch.Resize(ctx, 100, 30); kindOf(t, err) != proto.KindForbidden {
		t.Errorf("resize through the read-only link: %v, want forbidden", err)
	}
	_, _ = vch.Write([]byte("echo typed-by-viewer\r")) // dropped by the gateway
	typeUntil(ctx, t, shared, "echo owner-''says\r", "owner-says")
	if _, err := vch.ReadUntil(ctx, "owner-says"); err != nil {
		t.Fatalf("the link's socket does not see the session's output: %v", err)
	}
	if out := typeUntil(ctx, t, shared, "echo after-''view\r", "after-view"); strings.Contains(out, "typed-by-viewer") {
		t.Errorf("the read-only link's input reached the shell: %q", out)
	}

	writer, err := client.Dial(ctx, g.WS, client.DialOptions{Token: rw.Token})
	if err != nil {
		t.Fatal(err)
	}
	wch, _, err := writer.Attach(ctx, shared.Session(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wch.Write([]byte("echo from-''writer\r")); err != nil {
		t.Fatal(err)
	}
	if _, err := shared.ReadUntil(ctx, "from-writer"); err != nil {
		t.Fatalf("the read-write link's input did not reach the shell: %v", err)
	}
	if _, err := writer.Kill(ctx, shared.Session()); kindOf(t, err) != proto.KindForbidden {
		t.Errorf("kill through the read-write link: %v, want forbidden", err)
	}

	links, err := owner.ShareList(ctx, shared.Session())
	if err != nil || len(links) != 2 {
		t.Fatalf("share.list: %+v, %v; want 2 links", links, err)
	}
	for _, in := range links {
		if in.Token != "" || in.Viewers != 1 {
			t.Errorf("share.list entry %+v: want no token and 1 viewer", in)
		}
	}

	// A revocation closes the link's socket at once; the other link's stays.
	start := time.Now()
	res, err := owner.ShareRevoke(ctx, ro.Share)
	if err != nil || res.Closed != 1 {
		t.Fatalf("share.revoke: %+v, %v; want 1 socket closed", res, err)
	}
	testutil.WaitClosed(t, viewer.Done(), 2*time.Second, "the revoked link's socket to close")
	t.Logf("FIGURE the revoked link's socket closed %v after share.revoke", time.Since(start).Round(10*time.Microsecond))
	if testutil.Closed(writer.Done()) {
		t.Errorf("the other link's socket closed too")
	}
	if _, err := client.Dial(ctx, g.WS, client.DialOptions{Token: ro.Token}); err == nil {
		t.Errorf("a revoked link still authenticates")
	}

	// An expiry closes its sockets too.
	short, err := owner.ShareCreate(ctx, other.Session(), time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	// The page's way in: the token as a second subprotocol.
	dialer := websocket.Dialer{Subprotocols: []string{proto.Subprotocol, proto.SubprotocolSharePrefix + short.Token}}
	ws, resp, err := dialer.DialContext(ctx, g.WS, http.Header{"Origin": {g.Base}})
	if err != nil {
		t.Fatalf("upgrade with the link's token as a subprotocol: %v (%v)", err, resp)
	}
	if resp.Header.Get("Sec-WebSocket-Protocol") != proto.Subprotocol {
		t.Errorf("the gateway chose subprotocol %q, want %s", resp.Header.Get("Sec-WebSocket-Protocol"), proto.Subprotocol)
	}
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err = ws.ReadMessage()
	if !websocket.IsCloseError(err, 4003) {
		t.Errorf("the expired link's socket ended with %v, want close 4003", err)
	}
	ws.Close()
	if _, err := client.Dial(ctx, g.WS, client.DialOptions{Token: short.Token}); err == nil {
		t.Errorf("an expired link still authenticates")
	}
}

// TestCLIShare: muxterm share prints the UI's link (the token in its fragment), whose token
// authenticates a socket that sees the session; share ls lists it with its open socket; share
// revoke ends it, closing that socket.
func TestCLIShare(t *testing.T) {
	g := startGateway(t)
	env := cliEnv(t, g)
	id := newSession(t, env, "--name", "shared")
	out, errOut, code := runCLI(t, env, "share", "shared", "--ttl", "10m")
	link := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(link, g.Base+"/#share=") || !strings.Contains(errOut, "read-only") {
		t.Fatalf("muxterm share: code %d, stdout %q, stderr %q; want %s/#share=TOKEN", code, out, errOut, g.Base)
	}
	tok := strings.TrimPrefix(link, g.Base+"/#share=")
	ctx := ctxT(t, 20*time.Second)
	viewer, err := client.Dial(ctx, g.WS, client.DialOptions{Token: tok})
	if err != nil {
		t.Fatalf("dial with the printed link's token: %v", err)
	}
	if l, err := viewer.List(ctx); err != nil || len(l) != 1 || l[0].Session != id {
		t.Fatalf("the link's socket lists %+v (%v), want %s", l, err, id)
	}
	out, errOut, code = runCLI(t, env, "share", "ls", "shared")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(lines[1], "read-only") {
		t.Fatalf("muxterm share ls: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	fields := strings.Fields(lines[1])
	if fields[2] != "1" {
		t.Errorf("share ls shows %s open pages, want 1: %q", fields[2], lines[1])
	}
	out, errOut, code = runCLI(t, env, "share", "revoke", fields[0])
	if code != 0 || !strings.Contains(out, "1 open pages closed") {
		t.Fatalf("muxterm share revoke: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	testutil.WaitClosed(t, viewer.Done(), 2*time.Second, "the revoked link's socket to close")
	if _, _, code := runCLI(t, env, "share", "revoke", fields[0]); code == 0 {
		t.Errorf("revoking a revoked link succeeded")
	}
}

// A principal's live share links are bounded: the 65th is refused with limit_exceeded
// "shares", and links to a session that ended no longer count.
func TestShareLinksAreBounded(t *testing.T) {
	g := startGateway(t)
	defer g.Stop(10 * time.Second)
	ctx := ctxT(t, 60*time.Second)
	c := g.dial(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		if _, err := c.ShareCreate(ctx, ch.Session(), time.Hour, false); err != nil {
			t.Fatalf("link %d: %v", i, err)
		}
	}
	_, err = c.ShareCreate(ctx, ch.Session(), time.Hour, false)
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Kind() != proto.KindLimitExceeded || pe.Data["limit"] != "shares" {
		t.Fatalf("the 65th link: %v, want limit_exceeded shares", err)
	}
	if _, err := c.Kill(ctx, ch.Session()); err != nil {
		t.Fatal(err)
	}
	other, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ShareCreate(ctx, other.Session(), time.Hour, false); err != nil {
		t.Fatalf("a link once the first session's ended: %v", err)
	}
}

// A page opened from a share link is the link's, whatever else its request carries: with the
// owner's own cookie and a proxy's Basic Authorization too, the socket lists the one shared
// session, not the owner's others, and cannot open one.
func TestShareSubprotocolWinsOverCookieAndProxyAuth(t *testing.T) {
	g := startGateway(t)
	defer g.Stop(10 * time.Second)
	ctx := ctxT(t, 30*time.Second)
	owner := g.dial(t)
	shared, err := owner.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24}); err != nil {
		t.Fatal(err)
	}
	link, err := owner.ShareCreate(ctx, shared.Session(), time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	dialer := websocket.Dialer{Subprotocols: []string{proto.Subprotocol, proto.SubprotocolSharePrefix + link.Token}}
	h := http.Header{"Origin": {g.Base}, "Authorization": {"Basic cHJveHk6c2VjcmV0"},
		"Cookie": {g.cookie() + "=" + g.Token}}
	ws, resp, err := dialer.DialContext(ctx, g.WS, h)
	if err != nil {
		t.Fatalf("upgrade with a share subprotocol, the owner's cookie and a proxy's Basic auth: %v (%v)", err, resp)
	}
	defer ws.Close()
	call := func(id int, method, params string) map[string]any {
		t.Helper()
		if err := ws.WriteMessage(websocket.TextMessage, []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params))); err != nil {
			t.Fatal(err)
		}
		for {
			_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
			typ, b, err := ws.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if typ == websocket.TextMessage && json.Unmarshal(b, &m) == nil && m["id"] == float64(id) {
				return m
			}
		}
	}
	call(1, "initialize", `{}`)
	res := call(2, "session.list", `{}`)
	list, _ := res["result"].(map[string]any)["sessions"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["session"] != shared.Session() {
		t.Fatalf("session.list on the share socket: %v; want only the shared session", res)
	}
	if e, _ := call(3, "session.open", `{"channel":1,"cols":80,"rows":24}`)["error"].(map[string]any); e == nil || e["code"] != float64(proto.CodeForbidden) {
		t.Fatalf("session.open on the share socket: %v, want forbidden", e)
	}
}
