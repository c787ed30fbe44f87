package server

import (
	"bytes"
	"net"
	"testing"

	"github.com/latchd/latchd/codec"
)

// FuzzTaggedTurn runs any bytes through a tagged connection's turn: it
// never panics, consumes at most what it was given, and every answer it
// writes carries a tag, except the lone untagged "error" of a framing
// error, after which the connection closes.
func FuzzTaggedTurn(f *testing.F) {
	for _, s := range []string{
		"#1 l\nk\n0\n#2 l\nk\n5\n#3 r\nk\n0000000000000001a1b2c3d4e5f60718\n",
		"#a sl\ns\n0 2 30\n#b sl\ns\n0 2\n#c e\nq\n\n#d w\nq\n1\n",
		"#x session\n_\n\n#y l 0123456789abcdef0123456789abcdef\nk\n0\n",
		"#z bogus\nk\n\n#q tagged\n1\n\n#r auth\n_\nx\n",
		"l\nk\n0\n",
		"#1 rl\nrw\n0\n#2 wl\nrw\n0\n",
		"#1 l\nb\n0\n#2 ml\na b\n5 30\n#3 l\nk\n0\n#4 msl\ns t @x.1\n0 2\n",
		"#1 session\n_\n\n#2 ml 0123456789abcdef0123456789abcdef\na b\n0\n#3 ml\na a\n0\n",
		"#1 l\nk\n0\n#2 l\nk\n5\n#3 cancel\nk\n\n#4 cancel\nk\n\n",
		"#1 l\nb\n0\n#2 ml\na b\n5\n#3 cancel\na\nset\n#4 cancel\nb\nset\n",
	} {
		f.Add([]byte(s))
	}
	r := newRig(f, nil)
	f.Fuzz(func(t *testing.T, in []byte) {
		ss, ok := r.s.open(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, fakePeer{})
		if !ok {
			t.Fatal("open refused")
		}
		defer r.s.close(ss, nil)
		ss.tg.on = true
		used, out, closeNow := r.s.process(ss, in)
		if used < 0 || used > len(in) {
			t.Fatalf("process(%q) used %d", in, used)
		}
		for len(out) > 0 {
			i := bytes.IndexByte(out, '\n')
			if i < 0 {
				t.Fatalf("process(%q) wrote an unterminated line %q", in, out)
			}
			line := out[:i]
			out = out[i+1:]
			if _, _, ok := codec.SplitTagged(line); ok {
				continue
			}
			if string(line) != "error" || !closeNow || len(out) > 0 {
				t.Fatalf("process(%q) wrote the untagged line %q (close %v)", in, line, closeNow)
			}
		}
	})
}
