package codec

import "testing"

func BenchmarkDecode(b *testing.B) {
	in := []byte("sl\nsome-key\n10 3 30\n")
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		var req Request
		if n, err := Decode(in, &req); n != len(in) || err != nil {
			b.Fatal(n, err)
		}
	}
}

func BenchmarkAppendGrant(b *testing.B) {
	token := []byte(tok)
	out := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		out = AppendGrant(out[:0], StatusOK, token, 33)
	}
}

func BenchmarkDecodeResponse(b *testing.B) {
	in := []byte("ok " + tok + " 33\n")
	b.ReportAllocs()
	for b.Loop() {
		var r Response
		if _, err := DecodeResponse(in, &r); err != nil {
			b.Fatal(err)
		}
	}
}
