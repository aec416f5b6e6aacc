package proto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// errNotObject is returned by objectMembers for a JSON value that is not an
// object.
var errNotObject = errors.New("not a JSON object")

// objectMembers splits the JSON object raw into its members, each value
// trimmed of surrounding space. Member names are compared exactly. If a name
// appears twice it returns that name as dup, and no members.
func objectMembers(raw []byte) (members map[string]json.RawMessage, dup string, err error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, "", err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, "", errNotObject
	}
	members = make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, "", err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, "", errNotObject
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, "", err
		}
		if _, seen := members[name]; seen {
			return nil, name, nil
		}
		members[name] = bytes.TrimSpace(v)
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, "", errNotObject // trailing data
	}
	return members, "", nil
}

func isJSONNull(raw []byte) bool { return string(raw) == "null" }

// jsonString decodes raw if it is a JSON string.
func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// stringMember returns member name of m, which must be a string if present
// and not null; param names it in the error.
func stringMember(m map[string]json.RawMessage, name, param string) (s string, present bool, e *Error) {
	raw, ok := m[name]
	if !ok || isJSONNull(raw) {
		return "", false, nil
	}
	s, ok = jsonString(raw)
	if !ok {
		return "", true, ErrInvalidParams(param, param+" must be a string")
	}
	return s, true, nil
}

func optionalString(m map[string]json.RawMessage, name, param string) (string, *Error) {
	s, _, e := stringMember(m, name, param)
	return s, e
}

// intMember returns member name of m if it is present and not null. It must be
// a JSON number with an integral value in lo..hi; this is checked on the
// literal, before any conversion.
func intMember(m map[string]json.RawMessage, name string, lo, hi int64) (v int64, present bool, e *Error) {
	raw, ok := m[name]
	if !ok || isJSONNull(raw) {
		return 0, false, nil
	}
	v, ok = jsonInteger(raw)
	if !ok || v < lo || v > hi {
		return 0, true, ErrInvalidParams(name, fmt.Sprintf("%s must be an integer in %d..%d", name, lo, hi))
	}
	return v, true, nil
}

// requiredInt is intMember for a member that must be present.
func requiredInt(m map[string]json.RawMessage, name string, lo, hi int64) (int64, *Error) {
	v, present, e := intMember(m, name, lo, hi)
	if e == nil && !present {
		e = ErrInvalidParams(name, fmt.Sprintf("%s is required: an integer in %d..%d", name, lo, hi))
	}
	return v, e
}

// jsonInteger returns the value of the JSON number literal lit if that value
// is an integer that fits in an int64: 80, -7, 80.0, 8e1 and 800e-1 are, 1.5,
// 1e-1, 1e19 and "80" are not. It works on the digits alone, so neither a
// huge exponent nor a long literal costs more than one pass over lit.
func jsonInteger(lit []byte) (int64, bool) {
	s := lit
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	n := leadingDigits(s)
	if n == 0 {
		return 0, false // not a number: a string, true, null, an object...
	}
	intPart := s[:n]
	s = s[n:]
	var frac []byte
	if len(s) > 0 && s[0] == '.' {
		s = s[1:]
		n = leadingDigits(s)
		if n == 0 {
			return 0, false
		}
		frac = s[:n]
		s = s[n:]
	}
	// exp saturates at expLimit, far beyond any literal's digit count, so
	// the arithmetic below cannot overflow and a saturated exponent still
	// decides correctly (the value is 0, or too large, or not integral).
	const expLimit = 1 << 40
	var exp int64
	if len(s) > 0 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		expNeg := false
		if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
			expNeg = s[0] == '-'
			s = s[1:]
		}
		n = leadingDigits(s)
		if n == 0 {
			return 0, false
		}
		for _, c := range s[:n] {
			if exp < expLimit {
				exp = exp*10 + int64(c-'0')
			}
		}
		if expNeg {
			exp = -exp
		}
		s = s[n:]
	}
	if len(s) != 0 {
		return 0, false
	}

	// value = digits × 10^exp10, digits = intPart followed by frac.
	digits := make([]byte, 0, len(intPart)+len(frac))
	digits = append(append(digits, intPart...), frac...)
	exp10 := exp - int64(len(frac))
	digits = bytes.TrimLeft(digits, "0")
	if len(digits) == 0 {
		return 0, true
	}
	for digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		exp10++
	}
	if exp10 < 0 {
		return 0, false // a fraction is left
	}
	if int64(len(digits))+exp10 > 19 { // >= 10^19 > MaxInt64
		return 0, false
	}
	var u uint64 // < 10^19 < MaxUint64 throughout
	for _, c := range digits {
		u = u*10 + uint64(c-'0')
	}
	for range exp10 {
		u *= 10
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return int64(-u), true // -(1<<63) wraps to MinInt64, as intended
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

func leadingDigits(s []byte) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}
