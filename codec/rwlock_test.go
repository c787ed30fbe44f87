package codec

import (
	"errors"
	"testing"
)

func TestDecodeRW(t *testing.T) {
	tests := []struct {
		in      string
		cmd     Cmd
		base    Cmd
		write   bool
		timeout int64
		ttl     int64
		token   string
		err     error
	}{
		{in: "rl\nk\n10\n", cmd: CmdReadLock, base: CmdLock, timeout: 10},
		{in: "wl\nk\n0 30\n", cmd: CmdWriteLock, base: CmdLock, write: true, ttl: 30},
		{in: "rr\nk\n" + tok + "\n", cmd: CmdReadRelease, base: CmdRelease, token: tok},
		{in: "wr\nk\n" + tok + "\n", cmd: CmdWriteRelease, base: CmdRelease, write: true, token: tok},
		{in: "rn\nk\n" + tok + " 20\n", cmd: CmdReadRenew, base: CmdRenew, token: tok, ttl: 20},
		{in: "wn\nk\n" + tok + "\n", cmd: CmdWriteRenew, base: CmdRenew, write: true, token: tok},
		{in: "re\nk\n\n", cmd: CmdReadEnqueue, base: CmdEnqueue},
		{in: "we\nk\n15\n", cmd: CmdWriteEnqueue, base: CmdEnqueue, write: true, ttl: 15},
		{in: "rw\nk\n5\n", cmd: CmdReadWait, base: CmdWait, timeout: 5},
		{in: "ww\nk\n0\n", cmd: CmdWriteWait, base: CmdWait, write: true},
		{in: "rl\nk\n\n", cmd: CmdReadLock, base: CmdLock, err: ErrArgCount},
		{in: "wl\nk\n-1\n", cmd: CmdWriteLock, base: CmdLock, write: true, err: ErrNegative},
		{in: "wr\nk\n\n", cmd: CmdWriteRelease, base: CmdRelease, write: true, err: ErrEmptyToken},
		{in: "rx\nk\n1\n", err: ErrUnknownCmd},
		{in: "wll\nk\n1\n", err: ErrUnknownCmd},
	}
	for _, tt := range tests {
		var req Request
		n, err := Decode([]byte(tt.in), &req)
		if n != len(tt.in) || !errors.Is(err, tt.err) {
			t.Fatalf("%q: Decode = %d, %v; want %d, %v", tt.in, n, err, len(tt.in), tt.err)
		}
		if tt.err == ErrUnknownCmd {
			continue
		}
		if req.Cmd != tt.cmd || req.Cmd.Base() != tt.base || req.Cmd.Write() != tt.write || !req.Cmd.RW() {
			t.Fatalf("%q: cmd %v base %v write %v", tt.in, req.Cmd, req.Cmd.Base(), req.Cmd.Write())
		}
		if err == nil && (req.Timeout != tt.timeout || req.TTL != tt.ttl || string(req.Token) != tt.token) {
			t.Fatalf("%q: %+v", tt.in, req)
		}
	}
	for _, c := range []Cmd{CmdReadLock, CmdWriteLock, CmdReadWait, CmdWriteWait} {
		if !c.Blocking() {
			t.Errorf("%v does not block", c)
		}
	}
	if CmdLock.RW() || CmdStats.RW() || CmdLock.Base() != CmdLock || CmdSemLock.Write() {
		t.Error("lock commands taken for read-write ones")
	}
}

func TestDecodeRWAllocs(t *testing.T) {
	buf := []byte("wl\nkey\n10 30\n")
	var req Request
	if n := testing.AllocsPerRun(100, func() { _, _ = Decode(buf, &req) }); n != 0 {
		t.Fatalf("%v allocs per decode; want 0", n)
	}
}
