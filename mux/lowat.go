package mux

import (
	"net"
	"syscall"
)

// NotSentLowat bounds the output the gateway hands to the kernel ahead of a control message on
// a slow link: TCP_NOTSENT_LOWAT on every socket, so a write blocks while more than this many
// bytes wait unsent in the kernel's send buffer. Control messages go ahead of output in the
// gateway's own queue (flushControl, and before each channel's frame in serveRound), so a reply
// waits at most for this, the output frame being written (proto.MaxOutputPayload) and what the
// client's receive window holds: about (16 KiB + 32 KiB + its window) / the link's rate.
const NotSentLowat = 16 << 10

// tcpNotSentLowat is TCP_NOTSENT_LOWAT (linux/tcp.h); syscall does not name it.
const tcpNotSentLowat = 25

// tcpConn returns the TCP connection under ws (unwrapping NetConn: the websocket, TLS, the
// gateway's guarded connection), or nil for a socket that is not TCP (a test's pipe).
func tcpConn(ws Socket) *net.TCPConn {
	var c any = ws
	for {
		nc, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = nc.NetConn()
	}
	tc, _ := c.(*net.TCPConn)
	return tc
}

// boundUnsent sets TCP_NOTSENT_LOWAT on the TCP socket under ws (through TLS too); it does
// nothing for a socket that is not TCP and reports a failure to the caller.
func boundUnsent(ws Socket) error {
	tc := tcpConn(ws)
	if tc == nil {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat, NotSentLowat)
	}); err != nil {
		return err
	}
	return serr
}
