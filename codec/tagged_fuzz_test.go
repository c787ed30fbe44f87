package codec

import (
	"bytes"
	"errors"
	"testing"
)

// taggedSeeds are valid, invalid and partial tagged requests to start from.
var taggedSeeds = []string{
	"#1 l\nk1\n10\n",
	"#a7 sl 0123456789abcdef0123456789abcdef\nk @x.1\n0 3 20\n",
	"#z r\r\nk\r\n" + tok + "\r\n",
	"#t session\n_\n\n",
	"#t session\n0123456789abcdef0123456789abcdef\nclose\n",
	"#t l \nk\n1\n",
	"l\nk\n1\n",
	"#1 l\nk\n",
	"#12345678901234567 l\nk\n1\n",
	"#q stats\n_\n\n#r w\nk\n5\n",
	"#m ml\na b\n10 30\n",
	"#m msl 0123456789abcdef0123456789abcdef\ns1 s2 @3f9a1c0e5d7b2a48.1k\n0 2 30\n",
	"#m ml\na a\n0\n",
	"#c cancel\nk\n\n",
	"#c cancel 0123456789abcdef0123456789abcdef\na\nset\n",
}

// FuzzDecodeTagged checks DecodeTagged's properties on any input, as
// FuzzDecode does Decode's: n within bounds, framing errors only with
// n == 0, a tag only on a request that has one, a prefix of an
// incomplete input incomplete, and a valid request encoded again with
// AppendTagged decodes to the same request; and that the tag prefix of an
// answer splits back off.
func FuzzDecodeTagged(f *testing.F) {
	for _, s := range taggedSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var tr Tagged
		n, err := DecodeTagged(in, &tr)
		if n < 0 || n > len(in) {
			t.Fatalf("DecodeTagged(%q) consumed %d of %d bytes", in, n, len(in))
		}
		if (n == 0 && err != nil && !errors.Is(err, ErrLineTooLong)) || (n > 0 && errors.Is(err, ErrLineTooLong)) {
			t.Fatalf("DecodeTagged(%q) = %d, %v", in, n, err)
		}
		if errors.Is(err, ErrBadTag) != (n > 0 && tr.Tag == nil) {
			t.Fatalf("DecodeTagged(%q) = %d, %v with tag %q", in, n, err, tr.Tag)
		}
		if n == 0 && err == nil {
			for i := 0; i < len(in) && i < 600; i++ {
				var p Tagged
				if pn, perr := DecodeTagged(in[:i], &p); pn != 0 || perr != nil {
					t.Fatalf("DecodeTagged(%q) is incomplete but its prefix %q gives %d, %v", in, in[:i], pn, perr)
				}
			}
		}
		if tr.Tag != nil {
			line := AppendStatus(AppendTag(nil, tr.Tag), StatusQueued)
			tag, rest, ok := SplitTagged(line[:len(line)-1])
			if !ok || !bytes.Equal(tag, tr.Tag) || string(rest) != "queued" {
				t.Fatalf("answer %q splits to %q %q %v", line, tag, rest, ok)
			}
		}
		if err != nil || n == 0 {
			return
		}
		again := AppendTagged(nil, tr.Tag, tr.Cmd, tr.Session, tr.Key, tr.ReqID, tr.Arg)
		var tr2 Tagged
		n2, err2 := DecodeTagged(again, &tr2)
		if n2 != len(again) || err2 != nil || !sameRequest(&tr.Request, &tr2.Request) ||
			!bytes.Equal(tr.Tag, tr2.Tag) || !bytes.Equal(tr.Session, tr2.Session) {
			t.Fatalf("DecodeTagged(%q) = %+v, but its encoding %q decodes to %d, %v, %+v", in[:n], tr, again, n2, err2, tr2)
		}
	})
}
