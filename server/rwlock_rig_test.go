package server

import (
	"bytes"
	"testing"
)

var readLockRK = []byte("rl\nrk\n0 30\n")

// rwShared has a and b read-lock one key in a turn each, then release it
// with rr in a turn each: four read-write requests in four turns.
func (r *rig) rwShared(tb testing.TB) {
	for i, ss := range [2]*session{r.a, r.b} {
		out := r.run(tb, ss, readLockRK)
		if !bytes.HasPrefix(out, []byte("ok ")) {
			tb.Fatalf("reader %d: %q", i, out)
		}
		r.tokenLens[i] = copy(r.tokens[i][:], field(out[:len(out)-1], 1))
	}
	for i, ss := range [2]*session{r.a, r.b} {
		n := copy(r.relBatch[:cap(r.relBatch)], "rr\nrk\n")
		n += copy(r.relBatch[n:cap(r.relBatch)], r.tokens[i][:r.tokenLens[i]])
		n += copy(r.relBatch[n:cap(r.relBatch)], "\n")
		if out := r.run(tb, ss, r.relBatch[:n]); string(out) != "ok\n" {
			tb.Fatalf("reader %d release: %q", i, out)
		}
	}
}

// BenchmarkProcessRW measures process on two read holds of one key and
// their releases (four requests per op).
func BenchmarkProcessRW(b *testing.B) {
	r := newRig(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		r.rwShared(b)
	}
}
