//go:build !race

package server

import (
	"bytes"
	"testing"
)

var (
	taggedTry    = []byte("#1 l\nhk\n0\n")
	taggedWait   = []byte("#2 l\nhk\n30\n")
	taggedCancel = []byte("#c cancel\nhk\n\n")
)

// taggedHandOff runs one hand-off on tagged connections: a takes the key,
// b's l waits for it (its own Sink), a releases, b hears the grant with
// its tag and releases in turn.
func (r *rig) taggedHandOff(tb testing.TB) {
	r.taggedQueue(tb)
	r.release(tb, r.a, "#3", 0)
	out := r.run(tb, r.b, nil)
	if !bytes.HasPrefix(out, []byte("#2 ok ")) {
		tb.Fatalf("b's grant: %q", out)
	}
	r.tokenLens[1] = copy(r.tokens[1][:], field(out[:len(out)-1], 2))
	r.release(tb, r.b, "#4", 1)
}

// taggedQueue makes a take the key and b's l wait for it, on tagged
// connections.
func (r *rig) taggedQueue(tb testing.TB) {
	r.a.tg.on, r.b.tg.on = true, true
	out := r.run(tb, r.a, taggedTry)
	if !bytes.HasPrefix(out, []byte("#1 ok ")) {
		tb.Fatalf("a: %q", out)
	}
	r.tokenLens[0] = copy(r.tokens[0][:], field(out[:len(out)-1], 2))
	if out := r.run(tb, r.b, taggedWait); len(out) != 0 {
		tb.Fatalf("b's wait answered: %q", out)
	}
}

// release sends "<tag> r" for the token in slot i and checks the answer.
func (r *rig) release(tb testing.TB, ss *session, tag string, i int) {
	n := copy(r.relBatch[:cap(r.relBatch)], tag)
	n += copy(r.relBatch[n:cap(r.relBatch)], " r\nhk\n")
	n += copy(r.relBatch[n:cap(r.relBatch)], r.tokens[i][:r.tokenLens[i]])
	n += copy(r.relBatch[n:cap(r.relBatch)], "\n")
	out := r.run(tb, ss, r.relBatch[:n])
	if len(out) != len(tag)+4 || !bytes.HasPrefix(out, []byte(tag)) {
		tb.Fatalf("release %s: %q", tag, out)
	}
}

// TestTaggedHandOffAllocatesNothing: a tagged wait, its grant and the
// releases allocate nothing in the connections' turns.
func TestTaggedHandOffAllocatesNothing(t *testing.T) {
	r := newRig(t, nil)
	r.taggedHandOff(t)
	if n := testing.AllocsPerRun(200, func() { r.taggedHandOff(t) }); n != 0 {
		t.Errorf("a tagged hand-off allocates %v times per run; want 0", n)
	}
}

// taggedCancel runs one withdrawn wait: a takes the key, b's l waits,
// b's cancel withdraws it (the cancel and the wait answered in one turn),
// a releases.
func (r *rig) taggedCancel(tb testing.TB) {
	r.taggedQueue(tb)
	if out := r.run(tb, r.b, taggedCancel); string(out) != "#c ok\n#2 timeout\n" {
		tb.Fatalf("b's cancel: %q", out)
	}
	r.release(tb, r.a, "#3", 0)
}

// TestTaggedCancelAllocatesNothing: a tagged wait and the cancel that
// withdraws it allocate nothing in the connections' turns.
func TestTaggedCancelAllocatesNothing(t *testing.T) {
	r := newRig(t, nil)
	r.taggedCancel(t)
	if n := testing.AllocsPerRun(200, func() { r.taggedCancel(t) }); n != 0 {
		t.Errorf("a tagged wait and its cancel allocate %v times per run; want 0", n)
	}
}

// BenchmarkTaggedHandOff measures one tagged hand-off (four requests).
func BenchmarkTaggedHandOff(b *testing.B) {
	r := newRig(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		r.taggedHandOff(b)
	}
}
