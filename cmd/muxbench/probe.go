package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// probe is a minimal muxterm.v1 client for measuring the gateway alone: one goroutine reads the
// socket, counts output per channel and acknowledges every frame as soon as it arrives, so
// credit never waits on a consumer. (mux.Client hands output to a reader goroutine per channel
// and acks what that goroutine has read; on two cores those goroutines' scheduling then shows
// up in the per-channel byte counts.)
type probe struct {
	ws  *websocket.Conn
	wmu sync.Mutex // one writer at a time

	mu      sync.Mutex
	nextID  int
	pending map[string]chan probeResponse
	counts  map[uint32]*atomic.Int64
	first   map[uint32]chan struct{}

	done chan struct{} // closed when the reader ends
	err  error         // why the reader ended; read after done
}

type probeResponse struct {
	Result json.RawMessage
	Error  *proto.Error
}

func dialProbe(ctx context.Context, g *gatewayProc) (*probe, error) {
	ws, err := dialRaw(ctx, g.URL(), g.token)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	p := &probe{ws: ws, pending: map[string]chan probeResponse{}, counts: map[uint32]*atomic.Int64{},
		first: map[uint32]chan struct{}{}, done: make(chan struct{})}
	go p.readLoop()
	if _, err := p.call(ctx, proto.MethodInitialize, proto.InitializeParams{Client: proto.ClientInfo{Name: "muxbench-probe", Version: "1"}}); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *probe) write(typ int, b []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.ws.WriteMessage(typ, b)
}

func (p *probe) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	p.mu.Lock()
	p.nextID++
	n := p.nextID
	ch := make(chan probeResponse, 1)
	p.pending[strconv.Itoa(n)] = ch
	p.mu.Unlock()
	msg, err := proto.MarshalRequest(int64(n), method, params)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	if err := p.write(websocket.TextMessage, msg); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return nil, fmt.Errorf("%s: %w", method, r.Error)
		}
		return r.Result, nil
	case <-p.done:
		return nil, fmt.Errorf("%s: probe socket ended: %w", method, p.err)
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// open starts `sh -c script` on channel ch.
func (p *probe) open(ctx context.Context, ch uint32, script string, env map[string]string) (string, error) {
	p.mu.Lock()
	p.counts[ch], p.first[ch] = new(atomic.Int64), make(chan struct{})
	p.mu.Unlock()
	res, err := p.call(ctx, proto.MethodSessionOpen, proto.OpenParams{Channel: ch, Cmd: []string{"sh", "-c", script},
		Cols: 80, Rows: 24, Env: env})
	if err != nil {
		return "", err
	}
	var r proto.OpenResult
	if err := json.Unmarshal(res, &r); err != nil {
		return "", fmt.Errorf("session.open result: %w", err)
	}
	return r.Session, nil
}

func (p *probe) kill(ctx context.Context, id string) error {
	_, err := p.call(ctx, proto.MethodSessionKill, proto.KillParams{Session: id})
	return err
}

func (p *probe) count(ch uint32) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[ch].Load()
}

func (p *probe) firstByte(ch uint32) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first[ch]
}

func (p *probe) readLoop() {
	defer close(p.done)
	seen := map[uint32]bool{}
	var ack []byte
	for {
		typ, b, err := p.ws.ReadMessage()
		if err != nil {
			p.err = err
			return
		}
		if typ == websocket.BinaryMessage {
			f, err := proto.ParseFrame(b)
			if err != nil || f.Type != proto.FrameOutput {
				continue
			}
			p.mu.Lock()
			c, first := p.counts[f.Channel], p.first[f.Channel]
			p.mu.Unlock()
			if c == nil {
				continue
			}
			c.Add(int64(len(f.Payload)))
			if !seen[f.Channel] {
				seen[f.Channel] = true
				close(first)
			}
			ack = proto.AppendAck(ack[:0], f.Channel, uint32(len(f.Payload)))
			if err := p.write(websocket.BinaryMessage, ack); err != nil {
				p.err = err
				return
			}
			continue
		}
		var m proto.Message
		if json.Unmarshal(b, &m) != nil || !m.HasID() {
			continue // notifications and id-less errors
		}
		p.mu.Lock()
		ch := p.pending[string(m.ID)]
		delete(p.pending, string(m.ID))
		p.mu.Unlock()
		if ch != nil {
			ch <- probeResponse{Result: m.Result, Error: m.Error}
		}
	}
}

func (p *probe) close() {
	_ = p.ws.Close()
	<-p.done
}

// probeFlood runs n floods of script on one probe socket and measures the window.
func (b *bench) probeFlood(ctx context.Context, gw *gatewayProc, script string, n int) (floodResult, error) {
	p, err := dialProbe(ctx, gw)
	if err != nil {
		return floodResult{}, err
	}
	defer p.close()
	ids := make([]string, n)
	defer func() {
		kctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = parallel(kctx, n, 16, func(i int) error {
			if ids[i] != "" {
				_ = p.kill(kctx, ids[i])
			}
			return nil
		})
	}()
	err = parallel(ctx, n, 16, func(i int) error {
		id, err := p.open(ctx, uint32(i+1), script, map[string]string{b.tagKey: b.tagVal})
		ids[i] = id
		return err
	})
	if err != nil {
		return floodResult{}, err
	}
	firsts, counts := make([]<-chan struct{}, n), make([]func() int64, n)
	for i := range n {
		ch := uint32(i + 1)
		firsts[i], counts[i] = p.firstByte(ch), func() int64 { return p.count(ch) }
	}
	return measureWindow(ctx, b.cfg.Window, firsts, counts, gw.cpu)
}
