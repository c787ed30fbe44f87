package fence

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestTokenRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		tok  Token
		want string
	}{
		{name: "small", tok: Token{Fence: 1, Salt: 2}, want: "00000000000000010000000000000002"},
		{name: "hex digits", tok: Token{Fence: 0x0123456789abcdef, Salt: 0xfedcba9876543210}, want: "0123456789abcdeffedcba9876543210"},
		{name: "max", tok: Token{Fence: math.MaxUint64, Salt: math.MaxUint64}, want: strings.Repeat("f", 32)},
		{name: "zero", tok: Token{}, want: strings.Repeat("0", 32)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.tok.String(); got != tt.want {
				t.Fatalf("String() = %q; want %q", got, tt.want)
			}
			if got := string(tt.tok.AppendHex([]byte("x"))); got != "x"+tt.want {
				t.Fatalf("AppendHex = %q; want %q", got, "x"+tt.want)
			}
			got, err := Parse([]byte(tt.want))
			if err != nil || got != tt.tok {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tt.want, got, err, tt.tok)
			}
			got, err = ParseString(tt.want)
			if err != nil || got != tt.tok {
				t.Fatalf("ParseString(%q) = %+v, %v; want %+v", tt.want, got, err, tt.tok)
			}
			f, err := FenceOf(tt.want)
			if err != nil || f != tt.tok.Fence {
				t.Fatalf("FenceOf(%q) = %d, %v; want %d", tt.want, f, err, tt.tok.Fence)
			}
			if tt.tok.IsZero() != (tt.tok == Token{}) {
				t.Fatalf("IsZero() = %v", tt.tok.IsZero())
			}
		})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		tok := Token{Fence: rng.Uint64(), Salt: rng.Uint64()}
		s := tok.String()
		if got, err := ParseString(s); err != nil || got != tok || len(s) != TokenLen {
			t.Fatalf("%+v -> %q -> %+v, %v", tok, s, got, err)
		}
	}
}

func TestParseRejects(t *testing.T) {
	good := "0123456789abcdeffedcba9876543210"
	tests := []struct {
		name string
		in   string
	}{
		{name: "empty", in: ""},
		{name: "short", in: good[:31]},
		{name: "long", in: good + "0"},
		{name: "upper case", in: strings.ToUpper(good)},
		{name: "one upper-case digit", in: good[:31] + "A"},
		{name: "upper case in fence", in: "0123456789ABCDEF" + good[16:]},
		{name: "non-hex", in: good[:10] + "g" + good[11:]},
		{name: "space", in: good[:31] + " "},
		{name: "sign", in: "-" + good[1:]},
		{name: "0x prefix", in: "0x" + good[2:]},
		{name: "UUID form", in: "01234567-89ab-cdef-fedc-ba9876543210"},
		{name: "non-ASCII", in: "é" + good[2:]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := Parse([]byte(tt.in)); !errors.Is(err, ErrBadToken) || !got.IsZero() {
				t.Errorf("Parse(%q) = %+v, %v; want ErrBadToken", tt.in, got, err)
			}
			if _, err := ParseString(tt.in); !errors.Is(err, ErrBadToken) {
				t.Errorf("ParseString(%q) = %v; want ErrBadToken", tt.in, err)
			}
			if _, err := FenceOf(tt.in); !errors.Is(err, ErrBadToken) {
				t.Errorf("FenceOf(%q) = %v; want ErrBadToken", tt.in, err)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	tests := []struct {
		name string
		a, b Token
		want int
	}{
		{name: "older", a: Token{Fence: 1, Salt: 99}, b: Token{Fence: 2, Salt: 0}, want: -1},
		{name: "newer", a: Token{Fence: 3}, b: Token{Fence: 2, Salt: math.MaxUint64}, want: 1},
		{name: "same fence, salt ignored", a: Token{Fence: 5, Salt: 1}, b: Token{Fence: 5, Salt: 2}, want: 0},
		{name: "high bit", a: Token{Fence: 1 << 63}, b: Token{Fence: 1<<63 - 1}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Compare(tt.b); got != tt.want {
				t.Fatalf("Compare = %d; want %d", got, tt.want)
			}
			if got := tt.b.Compare(tt.a); got != -tt.want {
				t.Fatalf("reverse Compare = %d; want %d", got, -tt.want)
			}
		})
	}
}

// TestStringOrder checks that comparing two tokens' wire forms as strings
// orders them as their fence numbers do (when the fences differ).
func TestStringOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	edges := []uint64{0, 1, 9, 10, 15, 16, 255, 256, 1 << 32, 1<<63 - 1, 1 << 63, math.MaxUint64}
	for i := range 5000 {
		var a, b Token
		if i < len(edges)*len(edges) {
			a.Fence, b.Fence = edges[i/len(edges)], edges[i%len(edges)]
		} else {
			a.Fence, b.Fence = rng.Uint64()>>rng.IntN(64), rng.Uint64()>>rng.IntN(64)
		}
		a.Salt, b.Salt = rng.Uint64(), rng.Uint64()
		if a.Fence == b.Fence {
			continue
		}
		if got, want := strings.Compare(a.String(), b.String()), a.Compare(b); got != want {
			t.Fatalf("%+v vs %+v: string order %d, fence order %d", a, b, got, want)
		}
	}
}
