package cluster

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"time"
)

// signer signs what a node tells the others through NATS (its directory entries and its
// heartbeats) with a key derived from the cluster token, and checks what it reads. Whoever can
// publish on the NATS server (a NATS operator, the holder of the embedded server's credentials)
// but has not the cluster token cannot make a node list an entry or dial a URL: an unsigned or
// badly signed entry or heartbeat is ignored. The key's derivation differs from the NATS
// credentials' (EmbeddedCredentials), so the NATS password does not sign.
type signer struct{ key []byte }

// maxUnverifiedSources bounds the sources whose first unverified message is logged; past it,
// unverified messages are only counted.
const maxUnverifiedSources = 256

func newSigner(secret string) signer {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("muxterm cluster signing key"))
	return signer{key: m.Sum(nil)}
}

// sum is the signature of kind and fields, each length-prefixed (no two lists of fields sign
// alike).
func (s signer) sum(kind string, fields ...string) string {
	m := hmac.New(sha256.New, s.key)
	var b [binary.MaxVarintLen64]byte
	for _, f := range append([]string{kind}, fields...) {
		m.Write(b[:binary.PutUvarint(b[:], uint64(len(f)))])
		m.Write([]byte(f))
	}
	return hex.EncodeToString(m.Sum(nil))
}

func (s signer) verify(sig, kind string, fields ...string) bool {
	return hmac.Equal([]byte(sig), []byte(s.sum(kind, fields...)))
}

// entryFields: what an entry's signature covers, with its key (an entry signed for one key
// does not verify under another: a session id or node cannot be swapped).
func entryFields(key string, e Entry) []string {
	return []string{key, e.Principal, e.Name, e.Created.UTC().Format(time.RFC3339Nano), e.State, e.Boot}
}

func (s signer) signEntry(key string, e Entry) Entry {
	e.Sig = s.sum("entry", entryFields(key, e)...)
	return e
}

func (s signer) entryOK(key string, e Entry) bool {
	return s.verify(e.Sig, "entry", entryFields(key, e)...)
}

func heartbeatFields(hb heartbeat) []string {
	return []string{hb.Node, hb.URL, hb.Boot, strconv.Itoa(hb.Sessions)}
}

func (s signer) signHeartbeat(hb heartbeat) heartbeat {
	hb.Sig = s.sum("heartbeat", heartbeatFields(hb)...)
	return hb
}

func (s signer) heartbeatOK(hb heartbeat) bool {
	return s.verify(hb.Sig, "heartbeat", heartbeatFields(hb)...)
}

// unverified counts a message whose signature did not verify and logs the first from each
// source (the node its subject or key names).
func (n *Node) unverified(kind, source string) {
	if n.cfg.OnUnverified != nil {
		n.cfg.OnUnverified(kind)
	}
	n.mu.Lock()
	k := kind + " " + source
	first := !n.warned[k] && len(n.warned) < maxUnverifiedSources
	if first {
		n.warned[k] = true
	}
	n.mu.Unlock()
	if first {
		n.log.Warn("cluster: ignored a message whose signature does not verify (a NATS client without the cluster token wrote it); further ones from this source are only counted",
			"kind", kind, "source", source)
	}
}
