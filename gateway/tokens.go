package gateway

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// This file turns --token and --tokens FILE into the token → principal map (docs/security.md,
// "Principals and tokens"). Nothing here ever puts a token into an error or a log line: errors
// name the file, the line number and the field, never the field's content.

// Roles of a tokens file line.
const (
	RoleReadWrite = "read-write"
	RoleReadOnly  = "read-only"
	// RoleAdmin is read-write and may also read /metrics (gateway-wide counts).
	RoleAdmin = "admin"
)

// DefaultPrincipal is the principal of the single --token.
const DefaultPrincipal = "default"

// Bounds of a tokens file.
const (
	minTokenLen      = 16
	maxTokenLen      = 512
	maxPrincipalLen  = 64
	maxTokenFileSize = 1 << 20
	viewOfPrefix     = "view-of="
)

// Owner is the principal whose sessions p opens, lists and attaches to: p itself, or for a
// read-only principal the one it views.
func (p Principal) Owner() string {
	if p.ViewOf != "" {
		return p.ViewOf
	}
	return p.Name
}

// TokenEntry is one line of a tokens file.
type TokenEntry struct {
	Principal Principal
	Token     string
	Line      int
}

// ValidToken reports why tok cannot be a token, or nil. A token is 16 to 512 characters of
// the RFC 6750 token alphabet (A-Z a-z 0-9 - . _ ~ + / =), so it survives an Authorization
// header and a cookie unchanged. The error never contains tok.
func ValidToken(tok string) error {
	if len(tok) < minTokenLen {
		return fmt.Errorf("token too short: at least %d characters (openssl rand -hex 24 makes a good one)", minTokenLen)
	}
	if len(tok) > maxTokenLen {
		return fmt.Errorf("token too long: at most %d characters", maxTokenLen)
	}
	for i := range len(tok) {
		c := tok[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			strings.IndexByte("-._~+/=", c) >= 0) {
			return fmt.Errorf("token has a character outside A-Z a-z 0-9 - . _ ~ + / = (position %d)", i+1)
		}
	}
	return nil
}

func validPrincipalName(s string) error {
	if s == "" || len(s) > maxPrincipalLen {
		return fmt.Errorf("principal name must have 1 to %d characters", maxPrincipalLen)
	}
	for i := range len(s) {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			strings.IndexByte("-._@", c) >= 0) {
			return errors.New("principal name may only hold A-Z a-z 0-9 - . _ @")
		}
	}
	return nil
}

// ParseTokens parses a tokens file: one principal per line,
//
//	<principal> <role> <token> [view-of=<owner>]
//
// separated by spaces or tabs; role is read-write, admin (read-write that may also read
// /metrics) or read-only; a read-only line must name,
// with view-of, the read-write principal whose sessions it views, and a read-write line must
// not. Empty lines and lines starting with # are ignored, as is anything from a field starting
// with # to the end of its line. Principal names and tokens must be unique. It checks each line
// on its own; LoadPrincipals checks the whole set. Errors name the line, never a token.
func ParseTokens(r io.Reader) ([]TokenEntry, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxTokenFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTokenFileSize {
		return nil, fmt.Errorf("larger than %d bytes", maxTokenFileSize)
	}
	var out []TokenEntry
	for n, line := range strings.Split(string(b), "\n") {
		n++ // lines count from 1
		fields := strings.Fields(line)
		for i, f := range fields {
			if strings.HasPrefix(f, "#") {
				fields = fields[:i]
				break
			}
		}
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 3 {
			return nil, fmt.Errorf("line %d: want <principal> <role> <token> [view-of=<owner>], got %d fields", n, len(fields))
		}
		if len(fields) > 4 {
			return nil, fmt.Errorf("line %d: want at most 4 fields, got %d", n, len(fields))
		}
		e := TokenEntry{Principal: Principal{Name: fields[0]}, Token: fields[2], Line: n}
		if err := validPrincipalName(e.Principal.Name); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		switch fields[1] {
		case RoleReadWrite:
		case RoleAdmin:
			e.Principal.Admin = true
		case RoleReadOnly:
			e.Principal.ReadOnly = true
		default:
			return nil, fmt.Errorf("line %d: role must be %s, %s or %s", n, RoleReadWrite, RoleAdmin, RoleReadOnly)
		}
		if err := ValidToken(e.Token); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if len(fields) == 4 {
			owner, ok := strings.CutPrefix(fields[3], viewOfPrefix)
			if !ok {
				return nil, fmt.Errorf("line %d: the fourth field must be view-of=<owner>", n)
			}
			if err := validPrincipalName(owner); err != nil {
				return nil, fmt.Errorf("line %d: view-of: %w", n, err)
			}
			e.Principal.ViewOf = owner
		}
		switch {
		case e.Principal.ReadOnly && e.Principal.ViewOf == "":
			return nil, fmt.Errorf("line %d: a %s principal needs view-of=<owner>: the read-write principal whose sessions it may watch", n, RoleReadOnly)
		case !e.Principal.ReadOnly && e.Principal.ViewOf != "":
			return nil, fmt.Errorf("line %d: view-of is only for %s principals", n, RoleReadOnly)
		}
		out = append(out, e)
	}
	return out, nil
}

// LoadPrincipals returns the token → principal map of the single token (principal "default",
// admin: the operator who started the gateway; "" for none) and the tokens file at path ("" for none), and checks the set as a
// whole: principal names and tokens unique, every view-of naming a read-write principal, and
// at least one token. The file must be a regular file that no other user can read or write
// and that its group cannot write (the error says to chmod 600 it); a group-readable file is
// only warned about. Errors never contain a token.
func LoadPrincipals(token, path string, log *slog.Logger) (map[string]Principal, error) {
	if log == nil {
		log = slog.Default()
	}
	var entries []TokenEntry
	if token != "" {
		if err := ValidToken(token); err != nil {
			return nil, fmt.Errorf("--token: %w", err)
		}
		entries = append(entries, TokenEntry{Principal: Principal{Name: DefaultPrincipal, Admin: true}, Token: token})
	}
	if path != "" {
		fromFile, err := readTokenFile(path, log)
		if err != nil {
			return nil, fmt.Errorf("--tokens %s: %w", path, err)
		}
		entries = append(entries, fromFile...)
	}
	if len(entries) == 0 {
		return nil, errors.New("no token: give --token or --tokens")
	}
	where := func(e TokenEntry) string {
		if e.Line == 0 {
			return "--token"
		}
		return fmt.Sprintf("--tokens %s line %d", path, e.Line)
	}
	byName := make(map[string]TokenEntry, len(entries))
	out := make(map[string]Principal, len(entries))
	for _, e := range entries {
		if prev, dup := byName[e.Principal.Name]; dup {
			return nil, fmt.Errorf("%s: principal %q is already defined by %s", where(e), e.Principal.Name, where(prev))
		}
		byName[e.Principal.Name] = e
		if _, dup := out[e.Token]; dup {
			return nil, fmt.Errorf("%s: token already used by another principal", where(e))
		}
		out[e.Token] = e.Principal
	}
	for _, e := range entries {
		if e.Principal.ViewOf == "" {
			continue
		}
		owner, ok := byName[e.Principal.ViewOf]
		switch {
		case !ok:
			return nil, fmt.Errorf("%s: view-of=%s: no such principal", where(e), e.Principal.ViewOf)
		case owner.Principal.ReadOnly:
			return nil, fmt.Errorf("%s: view-of=%s: that principal is %s; view a %s one", where(e), e.Principal.ViewOf, RoleReadOnly, RoleReadWrite)
		}
	}
	return out, nil
}

// readTokenFile opens path, checks its type and mode on the open file, and parses it.
func readTokenFile(path string, log *slog.Logger) ([]TokenEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if perm := st.Mode().Perm(); perm&0o027 != 0 {
		return nil, fmt.Errorf("mode %04o lets other users read or change the tokens; chmod 600 it", perm)
	} else if perm&0o040 != 0 {
		log.Warn("tokens file is readable by its group; chmod 600 it", "path", path, "mode", fmt.Sprintf("%04o", perm))
	}
	return ParseTokens(f)
}
