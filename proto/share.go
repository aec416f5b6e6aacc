package proto

import (
	"encoding/json"
	"strings"
)

// Share links (protocol.md §4, "Share links"): an owner lets whoever holds a link's token see
// one session of theirs, read-only unless the link grants writing, until it expires or is
// revoked.

// Methods of share links.
const (
	MethodShareCreate = "share.create"
	MethodShareList   = "share.list"
	MethodShareRevoke = "share.revoke"
)

// SubprotocolSharePrefix carries a share link's token on a browser's upgrade, as a second
// subprotocol offered after muxterm.v1 ("muxterm.share.<token>"): a page cannot set headers on
// a WebSocket, and the link's token is no cookie of the gateway's.
const SubprotocolSharePrefix = "muxterm.share."

// MaxShareTTLMs bounds a share link's life: 7 days.
const MaxShareTTLMs = 7 * 86_400_000

// ShareCreateParams are the params of share.create: a link to session for ttl_ms, read-only
// unless write.
type ShareCreateParams struct {
	Session string `json:"session"`
	TTLMs   int64  `json:"ttl_ms"`
	Write   bool   `json:"write,omitempty"`
	Meta    *Meta  `json:"_meta,omitempty"`
}

// ShareListParams are the params of share.list: the live links to session.
type ShareListParams struct {
	Session string `json:"session"`
	Meta    *Meta  `json:"_meta,omitempty"`
}

// ShareRevokeParams are the params of share.revoke.
type ShareRevokeParams struct {
	Share string `json:"share"`
	Meta  *Meta  `json:"_meta,omitempty"`
}

// ShareInfo describes a share link. Token is only in share.create's result: the gateway keeps
// it, and lists never show it again.
type ShareInfo struct {
	Share   string `json:"share"`
	Session string `json:"session"`
	Write   bool   `json:"write"`
	Expires string `json:"expires"` // RFC 3339, UTC
	// Viewers counts the sockets open with the link now.
	Viewers int    `json:"viewers"`
	Token   string `json:"token,omitempty"`
}

// ShareListResult is share.list's result.
type ShareListResult struct {
	Shares []ShareInfo `json:"shares"`
}

// ShareRevokeResult is share.revoke's result: the sockets the revocation closed.
type ShareRevokeResult struct {
	Share  string `json:"share"`
	Closed int    `json:"closed"`
}

// DecodeShareCreate decodes and validates share.create's params: session a well-formed id,
// ttl_ms 1000..MaxShareTTLMs, write absent or a boolean.
func DecodeShareCreate(raw json.RawMessage) (ShareCreateParams, *Error) {
	var p ShareCreateParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if p.Session, e = requiredSessionID(m); e != nil {
		return p, e
	}
	if p.TTLMs, e = requiredInt(m, "ttl_ms", 1000, MaxShareTTLMs); e != nil {
		return p, e
	}
	if w, ok := m["write"]; ok && !isJSONNull(w) {
		if json.Unmarshal(w, &p.Write) != nil {
			return p, ErrInvalidParams("write", "write must be a boolean")
		}
	}
	return p, nil
}

// DecodeShareList decodes share.list's params: session a well-formed id.
func DecodeShareList(raw json.RawMessage) (ShareListParams, *Error) {
	var p ShareListParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	p.Session, e = requiredSessionID(m)
	return p, e
}

// DecodeShareRevoke decodes share.revoke's params: share a link's id (32 hex digits).
func DecodeShareRevoke(raw json.RawMessage) (ShareRevokeParams, *Error) {
	var p ShareRevokeParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	s, present, e := stringMember(m, "share", "share")
	if e != nil {
		return p, e
	}
	if !present || !wellFormedSessionID(strings.ToLower(s)) || s != strings.ToLower(s) {
		return p, ErrInvalidParams("share", "share is required: a share link's id")
	}
	p.Share = s
	return p, nil
}
