// Package client is the Go client of muxterm.v1 (docs/protocol.md): Dial or DialOpen a
// gateway, then open, attach to, resize, signal, detach from and kill sessions, each bound to a
// Channel whose Read returns the session's output in order and acknowledges it for flow
// control. A session opened with OpenOptions.Pipes runs without a terminal: Channel.ReadStream
// tells its stderr from its stdout, and Channel.CloseStdin ends its input.
// DialOptions.Reconnect redials a lost socket and re-attaches every bound channel from the offset
// it received up to. violation.go holds what the client refuses from a server (ErrProtocol,
// MaxOffset, MaxWindow, the checks of results), so that a hostile server ends the connection
// instead of making a reader spin or buffer without bound.
//
// Where things are: client.go, the Client and its lifecycle (Close, the ack loop, the channel
// registry); dial.go, DialOptions, Dial, DialOpen and the handshake; call.go, Call and the
// pending calls; sessions.go, the session and share methods; readloop.go, the reading and
// routing of what the server sends; channel.go, a Channel's state and what arrives on it;
// channelio.go, its reads, acks, writes and requests; reconnect.go, the reconnect and
// resume; recording.go, the recording methods; trace.go, the trace context of params._meta.
//
// It imports the standard library, gorilla/websocket and package proto, nothing else: it pulls
// in neither PTYs nor telemetry and builds on Linux, macOS and Windows. A request made with a
// context from proto.ContextWithMeta carries that W3C trace context as params._meta, so the
// gateway's spans continue the caller's trace. A Client's methods are
// safe for concurrent use; each Channel's Read is meant for one goroutine at a time.
//
// # Goroutines
//
//   - Client.readLoop: one per socket of a Client (one at a time, plus the one a reconnect is
//     dialing), started by dialLink (from Dial, DialOpen or a reconnect's attempt). gorilla's
//     dial honours only a deadline once connected, so dialLink records the connections it dials
//     and a context's end closes them through a context.AfterFunc callback: a hung upgrade ends
//     at once. DialOpen's grace after its context's end is another context.AfterFunc callback
//     that arms a timer, stopped when DialOpen returns. The loop reads its socket and routes
//     frames: an output frame is copied once, into its channel's buffer (segments in recycled
//     buffers of one frame's size, which Read gives back once it has read them, so a stream
//     allocates nothing per frame; a segment holds a whole buffer however few bytes it has, so a
//     channel's unread output costs up to 32 KiB more than its bytes, and one buffer more per gap
//     or reconnect, still bounded by its window). A response whose request binds a channel (open,
//     attach, a resume's attach) binds it before the next message is read, so the binding
//     precedes the channel's output. When its socket ends it fails the calls sent on it and, if
//     it was current, runs the reconnect (dial, initialize, re-attach every bound channel,
//     pipelined, then make the new socket current) or ends the client. It ends when its socket
//     ends (and its reconnect has finished); Close waits for every one (Client.readers).
//   - Client.ackLoop: one per Client, started by newClient: sends the acks Read queued for
//     drained channels, on the socket of the channel's binding; it ends with the client, and
//     Close waits for it.
//   - The reconnect's cancel watcher: one per reconnect: cancels the attempts when the client
//     ends; it ends then or when the reconnect's deadline passes.
//   - An undo: one per open or attach whose caller gave up before its response and that the
//     gateway bound anyway: it sends session.kill (for an open) or session.detach (for an attach)
//     from a goroutine of its own, bounded by WriteTimeout, since the response arrives on the
//     read loop.
//
// # Locks
//
//   - Client.mu: cur (the current socket, nil while reconnecting), up (closed when one is
//     current), init, dialing, calls, channels, closing, closeErr, each socket's ended and err.
//   - Channel.mu: the channel's binding (session, pid, on, epoch), offset, next, segs, unacked,
//     ackQueued, detaching, lost, notify (SetNotify's callback, called after it is released),
//     cols, rows and sizes (the latest session.size), exit, reason, endErr; never held together
//     with Client.mu.
//   - Client.wmu: one socket writer at a time (gorilla allows one); held across one socket write,
//     which DialOptions.WriteTimeout bounds (the one place a lock is held across a socket write,
//     in the client only); Channel.flushAck also takes an ack's count under it, so an ack either
//     precedes Detach's request or sees detaching; taken before Channel.mu and Client.mu.
//   - Client.ackMu: ackDue (channels whose Read drained the buffer with fewer than ackBytes
//     unacknowledged); the ackLoop goroutine sends those acks right after Read returns, so an ack
//     is never on the path of the output it follows.
package client
