//go:build !race

package codec

import "testing"

// TestAllocs checks the request path allocates nothing: Decode returns
// views, the encoders append to the caller's buffer (the race detector
// allocates, hence the build tag).
func TestAllocs(t *testing.T) {
	in := []byte("sl\r\nsome-key\r\n10 3 30\r\nr\nk\n" + tok + "\n")
	bad := []byte("l\nk\nxyz\n")
	withID := []byte("l\nsome-key @0123456789abcdef.42\n10 30\n")
	multiID := []byte("ml\nk1 k2 k3 @0123456789abcdef.42\n10 30\n")
	resp := []byte("ok " + tok + " 33\n")
	tagged := []byte("#a1 sl 0123456789abcdef0123456789abcdef\nsome-key\n10 3 30\n")
	cancel := []byte("#c2 cancel 0123456789abcdef0123456789abcdef\nk1\nset\n")
	out := make([]byte, 0, 256)
	tests := []struct {
		name string
		fn   func()
	}{
		{name: "Decode", fn: func() {
			var req Request
			n, err := Decode(in, &req)
			if err != nil || n == 0 {
				t.Fatal(n, err)
			}
			if n2, err := Decode(in[n:], &req); err != nil || n2 == 0 {
				t.Fatal(n2, err)
			}
		}},
		{name: "DecodeTagged", fn: func() {
			var tr Tagged
			if n, err := DecodeTagged(tagged, &tr); err != nil || n == 0 || tr.Session == nil {
				t.Fatal(n, err)
			}
		}},
		{name: "DecodeTagged cancel", fn: func() {
			var tr Tagged
			if n, err := DecodeTagged(cancel, &tr); err != nil || n == 0 || tr.Cmd != CmdCancel {
				t.Fatal(n, err)
			}
		}},
		{name: "AppendTagged", fn: func() {
			out = AppendTagged(out[:0], []byte("a1"), CmdLock, nil, []byte("k"), nil, []byte("1 2"))
			out = AppendGrant(AppendTag(out, []byte("a1")), StatusOK, []byte(tok), 30)
			if _, _, ok := SplitTagged(out[len(out)-10:]); ok {
				t.Fatal("split inside a line")
			}
		}},
		{name: "Decode request id", fn: func() {
			var req Request
			if n, err := Decode(withID, &req); err != nil || n == 0 || req.ReqID == nil {
				t.Fatal(n, err)
			}
		}},
		{name: "Decode ml request id", fn: func() {
			var req Request
			if n, err := Decode(multiID, &req); err != nil || n == 0 || req.ReqID == nil {
				t.Fatal(n, err)
			}
		}},
		{name: "Decode error", fn: func() {
			var req Request
			if _, err := Decode(bad, &req); err == nil {
				t.Fatal("no error")
			}
		}},
		{name: "AppendGrant", fn: func() { out = AppendGrant(out[:0], StatusOK, []byte(tok), 33) }},
		{name: "AppendStatus", fn: func() { out = AppendStatus(out[:0], StatusQueued) }},
		{name: "AppendRemaining", fn: func() { out = AppendRemaining(out[:0], 33) }},
		{name: "DecodeResponse", fn: func() {
			var r Response
			if _, err := DecodeResponse(resp, &r); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, tt.fn); n != 0 {
				t.Errorf("%s: %v allocs per run; want 0", tt.name, n)
			}
		})
	}
}
