// Package cluster lets several gateway nodes serve one set of sessions (docs/scaling.md). The
// session directory is a NATS JetStream key-value bucket (s.<node>.<session> → owner node,
// principal, name, created, state, the owner's boot id) that every node watches, the durable
// copy; each node also announces its sessions on core NATS and asks the others on a miss
// (announce.go), so no read waits for a JetStream leader election. Entries, announcements and
// heartbeats are signed with a key derived from the cluster token (sign.go); what does not verify
// is never listed nor dialled. Node liveness is a heartbeat each node publishes on core NATS every
// TTL/5: a node not heard from for 3/4 of the TTL is lost, noticed within 0.8 of it
// (liveness.go). A session another node owns is relayed to it over muxterm.v1 with the Go
// client and the cluster token (Node implements mux.Remote; a relay implements mux.Relay). The
// package also sweeps a node's stale entries at start, answers session.capture through the owner,
// places new sessions, runs the embedded NATS server (embedded.go: its clients and routes
// authenticated with credentials derived from the cluster token, EmbeddedCredentials), lets
// session.open wait for its directory entry (Published) and keeps the cluster's recordings
// (recordings.go): an ended recording is uploaded to the JetStream object store
// RecordingsBucket with signed metadata, and recording.list and recording.read answer on any
// node from the store, or from the owner node while the recording is being written. A read of
// the store is tried again while JetStream elects a leader ("no responders", "JetStream system
// temporarily unavailable", an unanswered request), within the request's deadline (jsRetry).
//
// It imports nats-server (the embedded server only), nats.go and its jetstream package (no other
// muxterm package does), client, mux, proto, session (the Observer of opens and removals, the
// recordings' OnEnd), internal/procfs and internal/record (retention).
//
// # Data flow
//
//	Registry.Open / removeLocked ──Observer (under Registry.mu: append only)──▶ Node.local, Node.annQ, Node.kvQ
//	Node.annQ ──announcer──▶ core NATS muxterm.dir.<node> ──▶ every node's onAnnounce ──▶ Node.entries, Node.tombs
//	Node.kvQ ──publisher (retries through elections)──▶ KV put/purge ──watcher──▶ Node.entries (unless tombs has the id)
//	List / lookup ◀── Node.entries; a miss: ask ──core NATS muxterm.ask──▶ every node's onAsk (from Node.local)
//	heartbeatLoop ──core NATS muxterm.heartbeat.<node> every TTL/5──▶ every node's onHeartbeat ──▶ Node.peers
//	Session.endRecording ──RecordOptions.OnEnd──▶ RecordingEnded ──recordings.q──▶ uploader ──object put (≤ 5 tries)──▶ muxterm-recordings, then retention
//	recording.list ──▶ mux: local dir ∪ Node.Recordings: other live nodes' lists (socket for the principal) ∪ the store's signed objects
//	recording.read ──▶ mux: local dir, else Node.ReadRecording: the owner node (session running there), else the store (cache ≤ 64 MiB)
//	monitor (every TTL/20): a peer silent > 3/4 TTL ──▶ lost ──▶ its relays: client closed ──▶ session.closed node_lost
//
//	client ──socket──▶ node B: mux conn ──Relay (client.Client, ManualAck)──socket──▶ node A: mux conn ──▶ Session
//	           acks ──▶ B credit.give + relay.Ack (queued) ──relay flusher──────▶ A credit.give
//	           input ──▶ B relay.Write (queued + in flight ≤ 64 KiB) ──relay flusher──▶ A: lease holds? ──▶ session input
//	                                                  B relaySock ◀── relay.input {channel, bytes} ── A
//	           lease: A leaseLoop ping "muxterm-lease <t>" every lease/5 ──▶ B client reader: until = arrival + lease ──pong──▶ A: expiry = t + lease
//	           output ◀── B writer: relay.Read (≤ B's credit) ◀── client buffer ◀── A writer (≤ A's credit)
//
// Relays are pooled (relaypool.go, with each socket's lease): the Go client sockets to an owner
// are shared per owner URL, principal and access mode (another past the owner's maxChannels), a
// channel on a shared socket detaches on its own (with hold when its client's socket dropped),
// and the last relay to leave closes the socket. A placed open keeps a socket of its own.
//
// At most once (docs/protocol.md §1): a relay's socket is leased (Muxterm-Relay-Lease, 3/4
// TTL). A's conn (mux/lease.go) sends a lease ping before its loops start and every lease/5 from
// leaseLoop; its pong handler extends the lease to the ping's send time + the lease, and the read
// loop checks the lease before it dispatches each message (fenced): once it has lapsed, the
// message and everything behind it are discarded and the socket closed. B's relaySock records
// each lease ping's arrival (the client's OnPing) and the input A reports taken
// (OnNotification); the queue and what was written and not reported taken hold at most 64 KiB.
// A relay whose binding B ended itself (node lost, a write that failed) holds back node_lost
// until the lease has surely lapsed on A (holdNodeLostLocked); a binding A's side ended (close
// frame, EOF, reset) is answered at once.
//
// In detail:
//
//   - A socket's session.attach (or kill, lease) for an id the local registry does not know goes
//     to mux.Remote on a slow-request goroutine: the owner comes from the directory, whose
//     entry's principal is checked first (another principal's session, its node alive or lost, is
//     mux.ErrNotRemote: the local unknown_session, as for a random id; node_lost only after that
//     check), the relay dials the owner's --node-url with the cluster token and the headers
//     naming the principal, and the owner's own mux checks ownership again. The owner serves the
//     relay like any socket; a socket authenticated with the cluster token is never relayed
//     further. An attach carries the client's screen mode and size, so the owner paints; the
//     relay's own re-attaches ask for raw bytes.
//   - Credit end to end: the relay's client never acknowledges by itself (ManualAck); B's read
//     loop passes each ack of its client on (relay.Ack → Channel.Ack), so the bytes A has in
//     flight (on the wire to B, buffered in B's client, on the wire to the client) never exceed
//     A's window. B's writer reads the relay's buffer only within B's own credit for the channel.
//   - The owner's session.size notifications reach the relay's client.Channel (Size, with a
//     count); B's writer compares that count with the one its channel last reported and writes
//     session.size with B's channel number, ahead of output, as for a local channel.
//   - Errors the owner sends without a request id about the relayed channel (input refused) are
//     kept by the relay (at most 64) and written by B's writer with B's channel number.
//   - B's read loop never writes to the owner: relay.Ack adds to a count and relay.Write copies
//     the input into the relay's upstream queue, and the relay's flusher goroutine writes them to
//     the owner's socket (acks first, then input in order; each write bounded by the client's
//     WriteTimeout, 10 s, and a write that fails ends the relay's socket: node_lost). The queue
//     holds at most a session input queue's worth of input (64 KiB); input that does not fit is
//     refused whole with limit_exceeded inputQueue, as the owner refuses input its program does
//     not read. An owner that stops reading thus delays only its own channel
//     (TestRelayUpstreamNeverBlocks, e2e's TestClusterStalledOwnerDoesNotBlockTheSocket).
//     relay.Close lets the flusher write what was queued before the detach. Resize, signal, kill,
//     lease and attach through a relay are round trips and run on slow-request goroutines.
//   - Start: StartEmbedded starts the embedded server (with a route listener and routes only when
//     --cluster-routes names some: JetStream refuses a cluster block without routes, so a lone
//     node is a cluster of one) and waits for its listeners, returning at once on the server's
//     fatal error, which its logger hands over (a route port in use: "Error listening on router
//     port: …": the node exits with it, and the other nodes, which cannot place the directory's
//     replicas without it, wait for it) or when the start's context ends; then Node.Start
//     connects and waits for the directory bucket. That context is the signal context: SIGTERM or
//     SIGINT at any moment of the start stops what was started and the gateway exits 0 ("stopped
//     while joining the cluster"). The embedded server's notices, warnings and errors go to the
//     gateway's log at debug (its own debug log, raft chatter, is not asked for).
//   - Shutdown: after the sockets and the sessions (whose removals the Observer queued), the node
//     flushes its directory writes, refuses new relays, closes its relays (a detach in flight is
//     cut short), stops its goroutines and NATS connection, and the embedded server shuts down
//     (waited for at most 2 s), all within --shutdown-timeout; what is not done by then is
//     abandoned (the next start sweeps). Other nodes' relays to it get session.closed {reason:
//     "shutdown"} from its sockets, like any client.
//   - A relay whose owner's socket ends without session.closed, or whose owner is declared lost,
//     reports node_lost once its buffer is delivered, except when the socket closed with 1012
//     (the owner upgrades in place): then the flusher resumes the relay (relay.resume: dial the
//     owner again, attach from the offset received) and swaps in the new binding; the writer
//     reads the old binding's buffered output first, acks for it are absorbed (ackDebt), and
//     State reports the channel bound meanwhile. A node's boot id is its pid and process start
//     time, which the exec keeps, and its heartbeat starts before its directory bucket is ready,
//     so an upgrading node is not declared lost; Node.KeepOnStart keeps the handed-over sessions'
//     entries through the start-up sweep.
//
// # Goroutines
//
//   - Node.watch (one per node, started by Node.Start): the directory watcher; applies puts and
//     deletes to Node.entries; ends with Node.Close.
//   - Node.publisher (one per node, Node.Start): writes this node's entries from kvQ, in order,
//     retrying a failed write (a JetStream election); ends with Node.Close, after a bounded
//     flush.
//   - Node.announcer (one per node, Node.Start, before the bucket's load): publishes this node's
//     entries' additions and removals from annQ on core NATS, in order, then flushes the
//     connection; ends with Node.Close, after a bounded flush.
//   - Node.uploader (one per node, Node.Start): uploads the ended recordings RecordingEnded
//     queued, in order, each tried up to uploadAttempts times, then applies the store's size
//     bound; ends with Node.Close, after a bounded flush (flushUploads).
//   - Node.StoreMissing's compare (one per start of a recording node, short): lists the store
//     (again every 0.5 s, for at most a minute, while it does not answer) and queues the uploads
//     of the node's ended recordings it lacks; ends then, or with Node.Close.
//   - Node.heartbeatLoop (one per node, started right after the NATS connection, before the
//     directory bucket is ready): publishes this node's heartbeat (name, node URL, boot id,
//     session count) every TTL/5; ends with Node.Close.
//   - Node.monitor (one per node, Node.Start): declares a peer lost after 3/4 of the TTL without
//     a heartbeat and ends its relays; ends with Node.Close.
//   - NATS client callbacks (nats.go's, one per subscription): onHeartbeat (peers) and the hello
//     answer (one heartbeat now); they end when the connection closes.
//   - A relay socket's client goroutines (client.Client's readLoop and ackLoop, per pooled socket:
//     one per owner node, principal and access mode, another past the owner's maxChannels; per
//     placed open), from relayPool.acquire (Node.Attach, a resume) and Node.Open: the socket to
//     the owner, shared by its relays, until its last relay lets it go (detach, socket end, node
//     lost).
//   - The relay flusher (one per relayed channel, startRelay): the relay's upstream queue (the
//     acks and input B's read loop queued, written to the owner's socket); resumes the relay when
//     the owner closes it with 1012; ends when the relay closes (after writing what was queued),
//     its socket ends otherwise, or a resume fails.
//   - The relay teardown (one per relay, short, relay.Close): session.detach to the owner (on a
//     detach), then closing the client; Node.Close waits for it.
//   - Node.CloseWithin's wait (one per call): waits for the node's goroutines; it outlives a call
//     whose context ended first.
//   - The embedded NATS server's own goroutines (StartEmbedded): the client and route listeners,
//     JetStream; until Embedded.Shutdown, after the node.
//
// # Locks
//
//   - Node.mu: entries (the directory as watched and announced, verified entries only), tombs
//     (removals announced, kept from the bucket's late writes for a minute), peers (what each
//     node's verified heartbeat said, when it was heard, alive), warned (the sources of unverified
//     messages logged), relays, closed (set first by Node.Close: a relay started after it is
//     refused, so none is added while Close waits), waiting (set before Close waits on the node's
//     goroutines: a relay closed after it runs its teardown outside that group); a leaf: no I/O
//     under it, a lost node's relays are closed after it is released.
//   - Node.localMu: local (this node's sessions, from the Observer: onAsk's answers,
//     reannounce); taken by Observe with session.Registry's mutex held; only an eventQueue.mu is
//     taken under it.
//   - eventQueue.mu: q, busy, idle (one per queue: annQ, kvQ); taken with session.Registry's
//     mutex held (append and a non-blocking wake only); a leaf.
//   - recordings.mu: ret, upload, store (the object store once bound), q and idle (the uploads
//     queued, closed when they drained), the content cache (cache, cached, lastUse); a leaf, no
//     I/O under it (RecordingEnded is called on a recording's end goroutine, no session lock
//     held).
//   - relay.mu: cur and drains (the current binding and those that ended with a restart and still
//     hold output, read first, oldest first, with each binding's read, acked, skip), lost,
//     closing, errs (the owner's id-less errors not yet passed on), ackDebt, sizeBase,
//     cancelResume, the upstream queue (ackDue, input, inputBytes); held across a read of a
//     channel with data buffered (never blocks); taken before the Go client's Channel.mu and
//     Client.mu, never under them (the client calls the relay's notify and error hooks with none
//     held).
//   - relayPool.mu: socks (the pooled sockets by owner URL, principal, access mode), dialing (a
//     dial in progress per key: other acquires wait for it), each socket's users; a leaf, no I/O
//     under it (the last release closes the socket after it).
//   - relaySock.mu: until (when the owner stops taking the socket's messages, on this node's
//     clock), takenBytes (input the owner reported taking, per channel) and relays (the channels
//     bound on the socket, to which the owner's id-less errors are routed by data.channel); set by
//     the client's reader (OnPing, OnNotification); a leaf, taken under relay.mu.
package cluster
