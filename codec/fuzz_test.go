package codec

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// requestSeeds are valid, invalid and partial requests to start from.
var requestSeeds = []string{
	"l\nk1\n10\n",
	"l\r\nk1\r\n10 30\r\n",
	"sl\nk\n0 3 20\n",
	"e\nk\n\n",
	"se\nk\n2 5\n",
	"n\nk\n" + tok + " 9\n",
	"sr\nk\n" + tok + "\n",
	"stats\n_\n\n",
	"rl\nk\n10 30\n",
	"we\nk\n5\n",
	"wr\nk\n" + tok + "\n",
	"auth\n_\na secret\n",
	"r\n\r\r\n1\n",
	"l\nk\n1\r0\n",
	"l\nk\n-1\n",
	"l\nk1\n10",
	"l\nk\n1\nw\nk\n2\n",
	"l\nk1 @c0ffee.1\n10 30\n",
	"r\nk @x\n" + tok + "\n",
	"l\nk @\n1\n",
}

// FuzzDecode checks Decode's properties on any input: n within bounds;
// framing errors only with n == 0 and request errors only with n > 0;
// an incomplete input stays incomplete when cut shorter; the first half
// alone is incomplete or decodes to the same result; and a valid request
// encoded again with AppendRequest decodes to the same request.
func FuzzDecode(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var req Request
		n, err := Decode(in, &req)
		if n < 0 || n > len(in) {
			t.Fatalf("Decode(%q) consumed %d of %d bytes", in, n, len(in))
		}
		if n == 0 && err != nil && !errors.Is(err, ErrLineTooLong) {
			t.Fatalf("Decode(%q) = 0, %v: a request error without consuming the request", in, err)
		}
		if n > 0 && errors.Is(err, ErrLineTooLong) {
			t.Fatalf("Decode(%q) = %d, %v: a framing error that consumed bytes", in, n, err)
		}
		if n == 0 && err == nil {
			step := 1 + len(in)/512 // every prefix of short inputs, a sample of long ones
			for i := 0; i < len(in); i += step {
				var p Request
				if pn, perr := Decode(in[:i], &p); pn != 0 || perr != nil {
					t.Fatalf("Decode(%q) is incomplete but its prefix %q gives %d, %v", in, in[:i], pn, perr)
				}
			}
		}
		// Split reads: the first half alone is incomplete or the same.
		var half Request
		hn, herr := Decode(in[:len(in)/2], &half)
		if (hn != 0 || herr != nil) && (hn != n || !errors.Is(herr, err) || (n > 0 && !sameRequest(&half, &req))) {
			t.Fatalf("Decode(%q) = %d, %v but its first half gives %d, %v", in, n, err, hn, herr)
		}
		if err != nil || n == 0 {
			return
		}
		again := AppendRequestID(nil, req.Cmd, req.Key, req.ReqID, req.Arg)
		var req2 Request
		n2, err2 := Decode(again, &req2)
		if n2 != len(again) || err2 != nil || !sameRequest(&req, &req2) {
			t.Fatalf("Decode(%q) = %+v, but its encoding %q decodes to %d, %v, %+v", in[:n], req, again, n2, err2, req2)
		}
	})
}

func sameRequest(a, b *Request) bool {
	return a.Cmd == b.Cmd && bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Arg, b.Arg) && bytes.Equal(a.ReqID, b.ReqID) &&
		bytes.Equal(a.Token, b.Token) && a.Timeout == b.Timeout && a.Limit == b.Limit && a.TTL == b.TTL
}

// FuzzDecodeResponse checks DecodeResponse never panics and keeps n in
// bounds on any line, and that the grant and renewal lines the server
// writes decode back to what was written.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte("ok "+tok+" 33\n"), uint64(1), uint64(2), int64(33), true)
	f.Add([]byte("acquired "+tok+" 33\r\n"), uint64(math.MaxUint64), uint64(0), int64(1), false)
	f.Add([]byte("ok {\"a\": [1, 2]}\n"), uint64(7), uint64(7), int64(-1), true)
	f.Add([]byte("error_not_leader h:1\nqueued\n"), uint64(0), uint64(1), int64(0), false)
	f.Add([]byte("ok  \n"), uint64(0), uint64(1), int64(MaxSeconds), false)
	f.Fuzz(func(t *testing.T, in []byte, fence, salt uint64, ttl int64, acquired bool) {
		var resp Response
		n, err := DecodeResponse(in, &resp)
		if n < 0 || n > len(in) {
			t.Fatalf("DecodeResponse(%q) consumed %d of %d bytes", in, n, len(in))
		}
		if want := bytes.IndexByte(in, '\n') + 1; n != want {
			t.Fatalf("DecodeResponse(%q) consumed %d; want the first line, %d", in, n, want)
		}
		if n == 0 && err != nil {
			t.Fatalf("DecodeResponse(%q) = 0, %v", in, err)
		}

		// Round trips. 18 digits is what the decoder reads; the server's
		// TTLs and remaining seconds are far smaller.
		ttl %= 1e18
		var token [32]byte
		hex := appendTestHex(appendTestHex(token[:0], fence), salt)
		st := StatusOK
		if acquired {
			st = StatusAcquired
		}
		line := AppendGrant(nil, st, hex, ttl)
		n, err = DecodeResponse(line, &resp)
		if n != len(line) || err != nil || resp.Status != st || !bytes.Equal(resp.Token, hex) || resp.N != ttl {
			t.Fatalf("AppendGrant gave %q, which decodes to %d, %v, %+v", line, n, err, resp)
		}
		line = AppendRemaining(nil, ttl)
		n, err = DecodeResponse(line, &resp)
		if n != len(line) || err != nil || resp.Status != StatusOK || resp.Token != nil || resp.N != ttl {
			t.Fatalf("AppendRemaining gave %q, which decodes to %d, %v, %+v", line, n, err, resp)
		}
	})
}

// appendTestHex appends v as 16 lowercase hex digits, as fence tokens are.
func appendTestHex(dst []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, digits[(v>>uint(shift))&0xf])
	}
	return dst
}
