package cluster

// NodeCounts returns how many other nodes of the cluster this node has heard of are alive and
// how many it has marked lost (for the muxterm.cluster.nodes gauge). Safe for concurrent use.
func (n *Node) NodeCounts() (alive, lost int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.peers {
		if p.alive {
			alive++
		} else {
			lost++
		}
	}
	return alive, lost
}
