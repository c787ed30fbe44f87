package fence

import (
	"cmp"
	"errors"
)

// TokenLen is the length of a token in its wire form: 32 lowercase hex
// characters, 16 for the fence number and 16 for the salt.
const TokenLen = 32

// ErrBadToken reports a token that is not 32 lowercase hex characters.
var ErrBadToken = errors.New("fence: token must be 32 lowercase hex characters")

// Token is a grant's fencing token. Fence strictly increases with every
// grant a server makes; Salt is crypto-random so a token cannot be guessed
// from its fence number. The zero Token is never issued.
type Token struct {
	Fence uint64
	Salt  uint64
}

const hexDigits = "0123456789abcdef"

// AppendHex appends the 32-character wire form of t to dst.
func (t Token) AppendHex(dst []byte) []byte {
	return appendHex64(appendHex64(dst, t.Fence), t.Salt)
}

// String returns the 32-character wire form of t.
func (t Token) String() string {
	var b [TokenLen]byte
	return string(t.AppendHex(b[:0]))
}

// IsZero reports whether t is the zero Token.
func (t Token) IsZero() bool { return t.Fence == 0 && t.Salt == 0 }

// Compare orders two tokens by fence number: -1 if t is older than u, 0 if
// they carry the same fence, +1 if t is newer.
func (t Token) Compare(u Token) int { return cmp.Compare(t.Fence, u.Fence) }

// Parse parses the 32-character wire form. It accepts only lowercase hex,
// so every token has exactly one spelling and string comparison of two
// tokens agrees with Compare.
func Parse(b []byte) (Token, error) {
	if len(b) != TokenLen {
		return Token{}, ErrBadToken
	}
	f, ok1 := parseHex64(b[:16])
	s, ok2 := parseHex64(b[16:])
	if !ok1 || !ok2 {
		return Token{}, ErrBadToken
	}
	return Token{Fence: f, Salt: s}, nil
}

// ParseString is Parse for a string.
func ParseString(s string) (Token, error) {
	if len(s) != TokenLen {
		return Token{}, ErrBadToken
	}
	var b [TokenLen]byte
	copy(b[:], s)
	return Parse(b[:])
}

// FenceOf returns the fence number of a token in wire form.
func FenceOf(s string) (uint64, error) {
	t, err := ParseString(s) // the zero Token on error
	return t.Fence, err
}

func appendHex64(dst []byte, v uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(v>>uint(shift))&0xf])
	}
	return dst
}

func parseHex64(b []byte) (uint64, bool) {
	var v uint64
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}
