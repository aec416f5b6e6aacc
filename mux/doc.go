// Package mux is the server side of the muxterm.v1 wire protocol described in docs/protocol.md:
// the per-connection multiplexer that binds channels to sessions and schedules output fairly, the
// per-channel credit used for flow control (credit.go), the rate limits (limits.go), the
// coalescing of refused frames (refuse.go: one queued error per channel and reason, counting
// frames and bytes), the converters from session types to the protocol's results and from signal
// names to this platform's signals (convert.go) and the socket's TCP_NOTSENT_LOWAT bound
// (lowat.go). The multiplexer is in these files: Serve, its options and the socket's close and
// linger (conn.go); a channel: reserve, bound, activate, unbind (channel.go); what a channel is
// bound to, one interface for a viewer of a local session and a relay to another node's
// (binding.go); the one goroutine that reads the socket, bounds every message, runs
// initialize and dispatches (read.go); the handler of each method, the slow-request pool, session
// errors to wire errors (handlers.go); request spans and the trace context a relayed request
// carries (spans.go); the one goroutine that writes it
// (write.go). Sessions of other nodes are reached through Remote and Relay (remote.go); an
// upgrade in place ends a socket with restart.go's notification. recording.go serves
// recording.list and recording.read (the owner's recordings, every one for an admin, none for a
// read-only principal or a share link's socket; in a cluster merged with, and falling back to,
// Remote.Recordings and Remote.ReadRecording); share links' methods go to ServerOptions.Shares.
// lease.go is a relay socket's lease (ServerOptions.RelayLease): lease pings from leaseLoop, and
// the read loop's fence that discards what arrives once the lease has lapsed (docs/protocol.md §1,
// "At most once"). The wire format itself (frames,
// JSON-RPC envelope, errors, params and results) lives in package proto, which the Go client
// (package client) shares.
//
// The credit type and the rate limiter are small value types with no I/O, so they are tested on
// their own. The multiplexer sees the WebSocket only through the Socket interface (NextReader,
// WriteMessage, WriteControl, the two deadlines, the pong handler, the read limit and Close: what
// a gorilla/websocket connection offers); its tests run over a real gorilla/websocket connection
// on 127.0.0.1, except the timer tests (pings, the pong wait, the time to initialize), which run
// Serve over an in-memory Socket inside a testing/synctest bubble, on a fake clock
// (fakesocket_test.go).
//
// Dependencies point one way: cmd/gateway → gateway → mux → session, and mux → proto and otel.
// Package mux never imports Echo, nor package gateway, nor package client outside its tests; the
// cluster plugs in through Remote, so mux knows no NATS. Protocol outcomes (session errors, bad
// frames, refused params) are turned into wire errors (*proto.Error, with data.kind) here and
// nowhere below.
//
// # Reading
//
// readLoop bounds every message (text: MaxMessageBytes, discarding the rest and replying
// limit_exceeded; binary: header + MaxInputBytes; beyond 16 MiB gorilla closes with 1009),
// refuses anything before initialize with close 1008 and a text message that is not UTF-8 with
// close 1007, unparsed (both through the writer, after the responses already queued, so a failed
// initialize's error arrives before the close; what follows is ignored), and dispatches. Errors
// about a binary frame whose header names a bound channel get data.channel (onKnownChannel),
// whatever is wrong with the frame.
//
// The read loop never waits for a session or another node. Requests that may wait run on
// slow-request goroutines (conn.slow, at most 16 per socket): session.open, session.kill,
// session.capture, recording.list and recording.read always; session.attach, session.resize,
// session.signal and session.lease when they go to another node (through Remote or a channel's
// relay). Everything else (acks, input, detach, list, a local attach, resize, signal or lease)
// runs on the read loop, so acks and input of other channels are never delayed.
//
// A binding becomes visible to the writer (active) only after its open or attach reply is queued,
// so no output frame precedes the reply. If the reply cannot be queued, the binding is closed at
// once: a failure right after subscribing still unsubscribes. When the socket ends, every binding
// is detached: Serve closes a local binding's viewer with Viewer.CloseHolding, which leaves a
// resume hold, and a relayed one with Relay.Close(false), whose owner keeps its own.
//
// # Writing
//
// writeLoop writes queued control messages first, then serves ready channels round-robin, one
// frame (at most 32 KiB and at most the channel's credit) per channel per round, flushing control
// messages ahead of every frame. Output is pulled from each channel's binding (a viewer, by
// offset, or a relay's buffer); a session held for another session's echo (session.Held) is sent
// in frames of at most 4 KiB (heldFrame), so an echo waits behind little.
//
// Serve sets TCP_NOTSENT_LOWAT (NotSentLowat, 16 KiB) on the socket (unwrapping NetConn() through
// TLS; a socket that is not TCP is left alone, a failure is logged at WARN), so a write blocks
// while more than that waits unsent in the kernel: the control messages queued meanwhile go out
// after at most that, the frame being written and the client's receive window, instead of after a
// send buffer the kernel autotunes to megabytes.
//
// A channel with output pending and no credit is marked starved and skipped; only an ack for a
// starved channel re-queues it (an ack for a channel that is keeping up wakes nobody). The writer
// stores starved before it looks at the credit once more, and the ack gives credit before it
// swaps starved out, so an ack that lands in between is seen by one side or the other
// (TestAckBetweenCreditCheckAndStarve forces that interleaving with a hook and stalls without the
// second look).
//
// session.gap precedes the data it concerns; session.exit and session.closed follow the binding's
// last byte (Viewer.State: nothing pending; the exit once the reader reached the end of output or
// 50 ms after the exit when a descendant keeps the PTY open). With no credit the writer still
// reads zero bytes, so gaps and these notifications are not held back once no output is pending.
// Output pending at a kill point is still sent under credit, so after a kill session.closed waits
// for acknowledgements (session.detach ends the wait). Before writing session.closed the writer
// removes the channel from conn.channels (under conn.mu) and unsubscribes it, so a reuse of the
// number read right after it never finds the old binding (TestChannelReusableWhenClosedArrives
// holds the writer after the write with a hook).
//
// The writer asks each channel's binding, in serveChannel, whether the session's size changed
// since the generation the channel last reported (sizeChanged: a local session's size
// generation, session.Session's sizeGen, an atomic; for a relayed channel the count of sizes the
// relay's client.Channel received), and writes session.size ahead of that channel's output. A
// relayed channel's id-less errors from the owner (Relay.Errors) go out there too.
//
// After a close frame of its own (closeWith for 1008, flushControl for a closeAfterQueued close),
// the socket lingers (lingerAfterClose): CloseWrite on the TCP connection (unwrapped through
// NetConn(); a writer stuck in a write fails at once, fail then leaves the socket open) and a
// read deadline closeLinger (5 s) ahead, kept in conn.lingerUntil under conn.mu; Serve's
// closeSocket drains the connection (io.Copy to io.Discard) until the client's FIN or that
// deadline and only then closes it, so the kernel does not answer unread input with a reset that
// would discard the close frame at the client (TestFloodedSocketSees1008).
//
// # Shutdown and restart
//
// Shutdown: the gateway cancels every socket's context with ErrShutdown; each writer sends
// session.closed {reason: shutdown} for its bindings and closes with 1001.
//
// Restart (an upgrade in place): the gateway cancels every socket's context with ErrRestart; each
// writer flushes what is queued, sends gateway.restart {resumeHoldMs} and closes with 1012
// (restartFlush), no session.closed; detachAll then leaves a resume hold per read-write binding,
// which the handover carries to the new image.
//
// # Goroutines
//
//   - conn.readLoop: one per socket, running in the HTTP handler's goroutine that calls Serve:
//     reading the socket, the read deadline, dispatch. It ends when a read fails or the socket is
//     closed.
//   - conn.writeLoop: one per socket, started by Serve: every socket write, the ping ticker,
//     write deadlines, and each channel's exitSent, closedSent and sizeGen. It ends when a write
//     fails or the connection's context ends.
//   - Slow requests: at most 16 per socket (maxPending), started by conn.slow, one request each;
//     each ends once it replied, and Serve waits for them.
//
// # Locks
//
// No lock is held across a socket write or a wait for a session. conn.readyMu may be taken with a
// session.Session's mutex held (the viewer's wake callback); nothing is taken under conn.readyMu
// or conn.mu, and conn.mu is never taken with a session lock held.
//
//   - conn.mu: channels (number → binding), ctrl (queued text messages), closeAfter (the close
//     frame the writer sends once ctrl is written) and closeWhy (the connection's end cause
//     then), lingerUntil (after a close frame of ours, when the drain of what the client still
//     sends ends).
//   - conn.readyMu: ready (channels that may have output, in round-robin order).
//   - RateLimiter.mu: buckets (key → tokens and time), lastSweep; shared by every socket (input
//     rate per session, open rate per principal); only arithmetic under it, never a wait.
//
// Fields without a lock: channel.credit (atomics; the writer takes, the reader gives);
// channel.active, detached, queued and starved (atomics); channel.exitSent, closedSent and
// sizeGen (owned by the writer once the channel is active; sizeGen is set before by the goroutine
// that binds it); conn.initialized (owned by the read loop).
package mux
