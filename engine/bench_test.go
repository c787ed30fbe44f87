package engine

import (
	"testing"
	"time"
)

func BenchmarkAcquireRelease(b *testing.B) {
	e, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	req := AcquireReq{Key: []byte("bench"), Owner: 1, Limit: 1, TTL: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		out, err := e.Acquire(0, req, nil)
		if err != nil || out.Result != Granted {
			b.Fatal(out, err)
		}
		if err := e.Release(0, req.Key, out.Token); err != nil {
			b.Fatal(err)
		}
	}
}
