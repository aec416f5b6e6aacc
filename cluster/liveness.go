package cluster

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// heartbeat is what a node publishes every TTL/5 on core NATS: the others learn from it that it
// lives, where to relay to it, and whether it restarted.
type heartbeat struct {
	Node     string `json:"node"`
	URL      string `json:"url"`
	Boot     string `json:"boot"` // bootID: a restart is a new boot, an upgrade in place is not
	Sessions int    `json:"sessions"`
	Sig      string `json:"sig"` // signer.signHeartbeat
}

// heartbeatLoop publishes this node's heartbeat every TTL/5.
func (n *Node) heartbeatLoop() {
	t := time.NewTicker(n.cfg.TTL / 5)
	defer t.Stop()
	for {
		n.beat()
		select {
		case <-t.C:
		case <-n.ctx.Done():
			return
		}
	}
}

// beat publishes one heartbeat.
func (n *Node) beat() {
	b, _ := json.Marshal(n.sign.signHeartbeat(heartbeat{Node: n.cfg.Name, URL: n.cfg.URL, Boot: n.boot, Sessions: n.cfg.Sessions()}))
	if err := n.nc.Publish(heartbeatSubj+n.cfg.Name, b); err != nil {
		n.log.Warn("cluster: heartbeat", "err", err)
	}
}

func (n *Node) onHeartbeat(m *nats.Msg) {
	var hb heartbeat
	if json.Unmarshal(m.Data, &hb) != nil || hb.Node == "" || hb.Node == n.cfg.Name {
		return
	}
	// Only a signed heartbeat names a node's URL: a relay dials no other, and sends the
	// cluster token to no other.
	if !n.sign.heartbeatOK(hb) || m.Subject != heartbeatSubj+hb.Node {
		n.unverified("heartbeat", strings.TrimPrefix(m.Subject, heartbeatSubj))
		return
	}
	n.mu.Lock()
	p := n.peers[hb.Node]
	if p == nil {
		p = &peer{}
		n.peers[hb.Node] = p
	}
	rebooted := p.boot != "" && p.boot != hb.Boot
	p.url, p.boot, p.sessions, p.seen, p.alive = hb.URL, hb.Boot, hb.Sessions, time.Now(), true
	var lost []*relay
	if rebooted {
		lost = n.relaysOfLocked(hb.Node) // their sessions died with the previous run
	}
	n.mu.Unlock()
	for _, r := range lost {
		r.nodeLost()
	}
}

// monitor marks a node lost once its heartbeat was not heard for 3/4 of the TTL (silence), and
// ends the relays to it.
func (n *Node) monitor() {
	tick := max(n.cfg.TTL/20, 10*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	lastExpiry := last
	for {
		select {
		case <-t.C:
		case <-n.ctx.Done():
			return
		}
		now := time.Now()
		var lost []*relay
		n.mu.Lock()
		if now.Sub(last) > n.silence()/2 {
			// This process did not run for a while (stopped, starved): the silence is ours,
			// not the peers'. Judge them afresh from now.
			for _, p := range n.peers {
				p.seen = now
			}
		}
		last = now
		if now.Sub(lastExpiry) > time.Second {
			n.expireTombsLocked(now)
			lastExpiry = now
		}
		for name, p := range n.peers {
			if p.alive && now.Sub(p.seen) > n.silence() {
				p.alive = false
				n.log.Warn("cluster: node lost", "lost", name, "silent", now.Sub(p.seen).Round(time.Millisecond))
				lost = append(lost, n.relaysOfLocked(name)...)
			}
		}
		n.mu.Unlock()
		for _, r := range lost {
			r.nodeLost()
		}
	}
}

// silence is how long a node may go unheard before it is lost: three heartbeats (TTL/5 apart)
// missed, so a node that dies is noticed within 0.8 TTL (3/4 TTL plus the monitor's tick).
func (n *Node) silence() time.Duration { return n.cfg.TTL * 3 / 4 }

func (n *Node) relaysOfLocked(node string) []*relay {
	var out []*relay
	for r := range n.relays {
		if r.node == node {
			out = append(out, r)
		}
	}
	return out
}

// currentLocked reports whether e was written by its node's current run, as far as this node
// knows: an entry of an earlier boot than the node's latest heartbeat names is a session that
// died with that run, listed by no one and answered as no session, even before the restarted
// node's sweep deletes it (its heartbeat starts before the sweep). An entry without a boot, or of
// a node not heard from yet, counts as current.
func (n *Node) currentLocked(e Entry) bool {
	p := n.peers[e.Node]
	return p == nil || p.boot == "" || e.Boot == "" || e.Boot == p.boot
}

// aliveLocked reports whether node is alive: not declared lost (heard within 3/4 of the TTL),
// or, never heard, named by the directory less than 3/4 of the TTL after this node started
// (its heartbeat may not have come yet).
func (n *Node) aliveLocked(node string) (url string, ok bool) {
	p := n.peers[node]
	if p == nil {
		return "", time.Since(n.started) <= n.silence()
	}
	return p.url, p.alive
}
