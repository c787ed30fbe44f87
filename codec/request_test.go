package codec

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

const tok = "0000000000000001a1b2c3d4e5f60718"

func TestDecode(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		wantErr     error
		wantCmd     Cmd
		wantKey     string
		wantToken   string
		wantTimeout int64
		wantLimit   int64
		wantTTL     int64
	}{
		// Every command with valid arguments, optional TTL absent and present.
		{name: "lock", in: "l\nk1\n10\n", wantCmd: CmdLock, wantKey: "k1", wantTimeout: 10},
		{name: "lock ttl", in: "l\nk1\n10 30\n", wantCmd: CmdLock, wantKey: "k1", wantTimeout: 10, wantTTL: 30},
		{name: "lock try", in: "l\nk1\n0\n", wantCmd: CmdLock, wantKey: "k1"},
		{name: "release", in: "r\nk1\n" + tok + "\n", wantCmd: CmdRelease, wantKey: "k1", wantToken: tok},
		{name: "renew", in: "n\nk1\n" + tok + "\n", wantCmd: CmdRenew, wantKey: "k1", wantToken: tok},
		{name: "renew ttl", in: "n\nk1\n" + tok + " 60\n", wantCmd: CmdRenew, wantKey: "k1", wantToken: tok, wantTTL: 60},
		{name: "enqueue", in: "e\nk1\n\n", wantCmd: CmdEnqueue, wantKey: "k1"},
		{name: "enqueue ttl", in: "e\nk1\n15\n", wantCmd: CmdEnqueue, wantKey: "k1", wantTTL: 15},
		{name: "wait", in: "w\nk1\n5\n", wantCmd: CmdWait, wantKey: "k1", wantTimeout: 5},
		{name: "sem lock", in: "sl\nk1\n5 3\n", wantCmd: CmdSemLock, wantKey: "k1", wantTimeout: 5, wantLimit: 3},
		{name: "sem lock ttl", in: "sl\nk1\n0 3 20\n", wantCmd: CmdSemLock, wantKey: "k1", wantLimit: 3, wantTTL: 20},
		{name: "sem release", in: "sr\nk1\n" + tok + "\n", wantCmd: CmdSemRelease, wantKey: "k1", wantToken: tok},
		{name: "sem renew", in: "sn\nk1\n" + tok + "\n", wantCmd: CmdSemRenew, wantKey: "k1", wantToken: tok},
		{name: "sem renew ttl", in: "sn\nk1\n" + tok + " 9\n", wantCmd: CmdSemRenew, wantKey: "k1", wantToken: tok, wantTTL: 9},
		{name: "sem enqueue", in: "se\nk1\n3\n", wantCmd: CmdSemEnqueue, wantKey: "k1", wantLimit: 3},
		{name: "sem enqueue ttl", in: "se\nk1\n3 20\n", wantCmd: CmdSemEnqueue, wantKey: "k1", wantLimit: 3, wantTTL: 20},
		{name: "sem wait", in: "sw\nk1\n7\n", wantCmd: CmdSemWait, wantKey: "k1", wantTimeout: 7},
		{name: "stats", in: "stats\n_\n\n", wantCmd: CmdStats, wantKey: "_"},
		{name: "stats any arg", in: "stats\n_\nwhatever you like here\n", wantCmd: CmdStats, wantKey: "_"},
		{name: "stats long arg", in: "stats\nx\na b c d e f g\n", wantCmd: CmdStats, wantKey: "x"},
		{name: "stats empty key", in: "stats\n\n\n", wantCmd: CmdStats},
		{name: "auth", in: "auth\n_\ns3cret\n", wantCmd: CmdAuth, wantKey: "_", wantToken: "s3cret"},
		{name: "auth secret with spaces", in: "auth\n_\na b c d e\n", wantCmd: CmdAuth, wantKey: "_", wantToken: "a b c d e"},
		// Line endings and spacing.
		{name: "CRLF", in: "l\r\nk1\r\n10 30\r\n", wantCmd: CmdLock, wantKey: "k1", wantTimeout: 10, wantTTL: 30},
		{name: "CRLF empty arg", in: "e\r\nk1\r\n\r\n", wantCmd: CmdEnqueue, wantKey: "k1"},
		{name: "tabs and runs of spaces", in: "sl\nk1\n  5\t 3  20 \n", wantCmd: CmdSemLock, wantKey: "k1", wantTimeout: 5, wantLimit: 3, wantTTL: 20},
		{name: "utf-8 key", in: "l\nclé/ü\n1\n", wantCmd: CmdLock, wantKey: "clé/ü", wantTimeout: 1},
		{name: "largest seconds", in: "l\nk\n1000000000 1000000000\n", wantCmd: CmdLock, wantKey: "k", wantTimeout: MaxSeconds, wantTTL: MaxSeconds},
		{name: "key of 256 bytes", in: "l\n" + strings.Repeat("k", MaxLine) + "\n1\n", wantCmd: CmdLock, wantKey: strings.Repeat("k", MaxLine), wantTimeout: 1},
		{name: "key of 256 bytes CRLF", in: "l\r\n" + strings.Repeat("k", MaxLine) + "\r\n1\r\n", wantCmd: CmdLock, wantKey: strings.Repeat("k", MaxLine), wantTimeout: 1},

		// Request errors: the request is consumed (n == len(in)).
		{name: "unknown command", in: "x\nk\n1\n", wantErr: ErrUnknownCmd},
		{name: "upper-case command", in: "L\nk\n1\n", wantErr: ErrUnknownCmd},
		{name: "empty command", in: "\nk\n1\n", wantErr: ErrUnknownCmd},
		{name: "command with CR inside", in: "l\r\r\nk\n1\n", wantErr: ErrUnknownCmd},
		{name: "empty key", in: "l\n\n10\n", wantErr: ErrBadKey},
		{name: "empty key CRLF", in: "r\r\n\r\n" + tok + "\r\n", wantErr: ErrBadKey},
		{name: "key with space", in: "l\na b\n10\n", wantErr: ErrBadKey},
		{name: "key with tab", in: "l\na\tb\n10\n", wantErr: ErrBadKey},
		{name: "key of CR", in: "r\n\r\r\n1\n", wantErr: ErrBadKey},
		{name: "key with CR inside", in: "l\na\rb\n1\n", wantErr: ErrBadKey},
		{name: "bad integer", in: "l\nk\nabc\n", wantErr: ErrBadInt},
		{name: "integer with junk", in: "l\nk\n1x\n", wantErr: ErrBadInt},
		{name: "lone minus", in: "l\nk\n-\n", wantErr: ErrBadInt},
		{name: "integer too long", in: "l\nk\n99999999999999999999\n", wantErr: ErrBadInt},
		{name: "seconds over the cap", in: "l\nk\n1000000001\n", wantErr: ErrBadInt},
		{name: "bad ttl integer", in: "l\nk\n1 x\n", wantErr: ErrBadInt},
		{name: "negative timeout", in: "l\nk\n-1\n", wantErr: ErrNegative},
		{name: "negative wait timeout", in: "w\nk\n-5\n", wantErr: ErrNegative},
		{name: "negative sem timeout", in: "sl\nk\n-1 3\n", wantErr: ErrNegative},
		{name: "zero ttl", in: "l\nk\n10 0\n", wantErr: ErrNonPositive},
		{name: "negative ttl", in: "l\nk\n10 -5\n", wantErr: ErrNonPositive},
		{name: "zero limit", in: "sl\nk\n10 0\n", wantErr: ErrNonPositive},
		{name: "negative limit", in: "se\nk\n-2\n", wantErr: ErrNonPositive},
		{name: "zero sem ttl", in: "sl\nk\n10 2 0\n", wantErr: ErrNonPositive},
		{name: "zero enqueue ttl", in: "e\nk\n0\n", wantErr: ErrNonPositive},
		{name: "zero renew ttl", in: "n\nk\n" + tok + " 0\n", wantErr: ErrNonPositive},
		{name: "empty release token", in: "r\nk\n\n", wantErr: ErrEmptyToken},
		{name: "blank release token", in: "r\nk\n  \n", wantErr: ErrEmptyToken},
		{name: "empty renew token", in: "n\nk\n\n", wantErr: ErrEmptyToken},
		{name: "empty sem release token", in: "sr\nk\n\n", wantErr: ErrEmptyToken},
		{name: "stats key with CR", in: "stats\na\rb\n\n", wantErr: ErrBadKey},
		{name: "auth key with CR", in: "auth\n\r\r\nsecret\n", wantErr: ErrBadKey},
		{name: "stats arg with CR", in: "stats\n_\na\rb\n", wantErr: ErrBadArg},
		{name: "empty auth secret", in: "auth\n_\n\n", wantErr: ErrEmptyToken},
		{name: "lock without timeout", in: "l\nk\n\n", wantErr: ErrArgCount},
		{name: "lock with three args", in: "l\nk\n1 2 3\n", wantErr: ErrArgCount},
		{name: "wait with two args", in: "w\nk\n1 2\n", wantErr: ErrArgCount},
		{name: "sem lock without limit", in: "sl\nk\n1\n", wantErr: ErrArgCount},
		{name: "sem lock with four args", in: "sl\nk\n1 2 3 4\n", wantErr: ErrArgCount},
		{name: "sem lock with five args", in: "sl\nk\n1 2 3 4 5\n", wantErr: ErrArgCount},
		{name: "sem enqueue without limit", in: "se\nk\n\n", wantErr: ErrArgCount},
		{name: "enqueue with two args", in: "e\nk\n1 2\n", wantErr: ErrArgCount},
		{name: "release with two args", in: "r\nk\n" + tok + " 1\n", wantErr: ErrArgCount},
		{name: "renew with three args", in: "n\nk\n" + tok + " 1 2\n", wantErr: ErrArgCount},
		{name: "CR inside arg", in: "l\nk\n1\r0\n", wantErr: ErrBadArg},
		{name: "CR ending arg before CRLF", in: "l\nk\n10\r\r\n", wantErr: ErrBadArg},
		{name: "CR in token", in: "r\nk\nab\rcd\n", wantErr: ErrBadArg},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req Request
			n, err := Decode([]byte(tt.in), &req)
			if n != len(tt.in) || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Decode(%q) = %d, %v; want %d, %v", tt.in, n, err, len(tt.in), tt.wantErr)
			}
			if tt.wantErr != nil {
				return
			}
			if req.Cmd != tt.wantCmd || string(req.Key) != tt.wantKey || string(req.Token) != tt.wantToken {
				t.Errorf("Decode(%q) = cmd %v key %q token %q; want %v %q %q",
					tt.in, req.Cmd, req.Key, req.Token, tt.wantCmd, tt.wantKey, tt.wantToken)
			}
			if req.Timeout != tt.wantTimeout || req.Limit != tt.wantLimit || req.TTL != tt.wantTTL {
				t.Errorf("Decode(%q) = timeout %d limit %d ttl %d; want %d %d %d",
					tt.in, req.Timeout, req.Limit, req.TTL, tt.wantTimeout, tt.wantLimit, tt.wantTTL)
			}
		})
	}
}

// TestDecodeIncomplete feeds every proper prefix of valid requests: each
// must decode as incomplete (n == 0, nil error), never as an error or a
// shorter request.
func TestDecodeIncomplete(t *testing.T) {
	for _, in := range []string{
		"l\nk1\n10 30\n",
		"l\r\nk1\r\n10 30\r\n",
		"e\nk1\n\n",
		"e\r\nk1\r\n\r\n",
		"sn\nk1\n" + tok + " 9\n",
		"stats\n_\n\n",
		"l\n" + strings.Repeat("k", MaxLine) + "\r\n1\n",
	} {
		for i := range len(in) {
			var req Request
			if n, err := Decode([]byte(in[:i]), &req); n != 0 || err != nil {
				t.Fatalf("Decode(%q) = %d, %v; want 0, nil (prefix of %q)", in[:i], n, err, in)
			}
		}
	}
}

// TestDecodeStream decodes many pipelined requests from one buffer, as the
// server does, consuming exactly one request per call.
func TestDecodeStream(t *testing.T) {
	reqs := []string{
		"l\na\n10\n",
		"r\na\n" + tok + "\n",
		"sl\r\nb\r\n0 2 5\r\n",
		"x\nbad\ncommand\n", // a request error consumes its request only
		"e\nc\n\n",
		"stats\n_\n\n",
	}
	wantCmds := []Cmd{CmdLock, CmdRelease, CmdSemLock, CmdInvalid, CmdEnqueue, CmdStats}
	buf := []byte(strings.Join(reqs, "") + "w\nc\n") // and an incomplete one
	off := 0
	for i, want := range reqs {
		var req Request
		n, err := Decode(buf[off:], &req)
		if n != len(want) {
			t.Fatalf("request %d: Decode = %d, %v; want %d", i, n, err, len(want))
		}
		if (err != nil) != (wantCmds[i] == CmdInvalid) || (err == nil && req.Cmd != wantCmds[i]) {
			t.Fatalf("request %d: cmd %v err %v; want %v", i, req.Cmd, err, wantCmds[i])
		}
		off += n
	}
	var req Request
	if n, err := Decode(buf[off:], &req); n != 0 || err != nil {
		t.Fatalf("trailing partial request: Decode = %d, %v; want 0, nil", n, err)
	}
}

func TestDecodeLineLimit(t *testing.T) {
	long := strings.Repeat("k", MaxLine+1)
	max := strings.Repeat("k", MaxLine)
	tests := []struct {
		name    string
		in      string
		wantN   int
		wantErr error
	}{
		{name: "256 bytes", in: "l\n" + max + "\n1\n", wantN: len(max) + 5},
		{name: "256 bytes CRLF", in: "l\n" + max + "\r\n1\n", wantN: len(max) + 6},
		{name: "257 bytes", in: "l\n" + long + "\n1\n", wantErr: ErrLineTooLong},
		{name: "257 bytes CRLF", in: "l\n" + long + "\r\n1\n", wantErr: ErrLineTooLong},
		{name: "257 bytes, no newline yet", in: "l\n" + long, wantErr: ErrLineTooLong},
		{name: "257 bytes in the first line", in: long, wantErr: ErrLineTooLong},
		{name: "long third line", in: "l\nk\n" + long, wantErr: ErrLineTooLong},
		{name: "256 bytes and CR, no newline yet", in: "l\n" + max + "\r"},
		{name: "256 bytes, no newline yet", in: "l\n" + max},
		{name: "256 bytes, CR and more", in: "l\n" + max + "\rx", wantErr: ErrLineTooLong},
		{name: "256 bytes with CR inside", in: "l\n" + max[1:] + "\r\r\n1\n", wantN: len(max) + 6, wantErr: ErrBadKey},
		{name: "long line ahead of the request", in: "l\nk\n1\n" + long},
		{name: "megabyte without newline", in: strings.Repeat("x", 1<<20), wantErr: ErrLineTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req Request
			n, err := Decode([]byte(tt.in), &req)
			wantN := tt.wantN
			if tt.name == "long line ahead of the request" {
				wantN = 6 // the complete request before it decodes
			}
			if n != wantN || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Decode = %d, %v; want %d, %v", n, err, wantN, tt.wantErr)
			}
		})
	}
}

func TestAppendRequest(t *testing.T) {
	got := AppendRequest([]byte("x"), CmdSemLock, []byte("k"), []byte("1 2 3"))
	if want := "xsl\nk\n1 2 3\n"; string(got) != want {
		t.Fatalf("AppendRequest = %q; want %q", got, want)
	}
	for c := CmdAuth; c < numCmds; c++ {
		name := c.String()
		if c == CmdCancel { // tagged mode only
			if lookupCmd([]byte(name)) != CmdInvalid {
				t.Errorf("the plain decoder knows %q", name)
			}
			continue
		}
		if name == "" || lookupCmd([]byte(name)) != c {
			t.Errorf("command %d: name %q does not look up to itself", c, name)
		}
	}
	if CmdInvalid.String() != "" || Cmd(200).String() != "" {
		t.Error("invalid commands have names")
	}
}

func TestCmdKinds(t *testing.T) {
	tests := []struct {
		cmd       Cmd
		semaphore bool
		blocking  bool
	}{
		{cmd: CmdLock, blocking: true},
		{cmd: CmdWait, blocking: true},
		{cmd: CmdSemLock, semaphore: true, blocking: true},
		{cmd: CmdSemWait, semaphore: true, blocking: true},
		{cmd: CmdSemRelease, semaphore: true},
		{cmd: CmdSemRenew, semaphore: true},
		{cmd: CmdSemEnqueue, semaphore: true},
		{cmd: CmdRelease},
		{cmd: CmdRenew},
		{cmd: CmdEnqueue},
		{cmd: CmdStats},
		{cmd: CmdAuth},
	}
	for _, tt := range tests {
		if tt.cmd.Semaphore() != tt.semaphore || tt.cmd.Blocking() != tt.blocking {
			t.Errorf("%v: Semaphore %v Blocking %v; want %v %v",
				tt.cmd, tt.cmd.Semaphore(), tt.cmd.Blocking(), tt.semaphore, tt.blocking)
		}
	}
}

func TestValidKey(t *testing.T) {
	for _, k := range []string{"a", "lock/1", "clé", strings.Repeat("x", 300)} {
		if !ValidKey([]byte(k)) {
			t.Errorf("ValidKey(%q) = false", k)
		}
	}
	for _, k := range []string{"", " ", "a b", "a\tb", "a\r", "a\nb"} {
		if ValidKey([]byte(k)) {
			t.Errorf("ValidKey(%q) = true", k)
		}
	}
}

// TestDecodeAliases checks Key, Arg and Token are views into the buffer.
func TestDecodeAliases(t *testing.T) {
	buf := []byte("r\nkey\n" + tok + "\n")
	var req Request
	if _, err := Decode(buf, &req); err != nil {
		t.Fatal(err)
	}
	copy(buf, bytes.ToUpper(buf))
	if string(req.Key) != "KEY" || string(req.Token) != strings.ToUpper(tok) {
		t.Fatalf("Key %q Token %q do not alias the buffer", req.Key, req.Token)
	}
}
