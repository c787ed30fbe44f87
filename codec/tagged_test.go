package codec

import (
	"bytes"
	"errors"
	"testing"
)

func TestDecodeTagged(t *testing.T) {
	sid := "0123456789abcdef0123456789abcdef"
	tests := []struct {
		in       string
		tag, ses string
		cmd      Cmd
		key, id  string
		err      error
	}{
		{in: "#1 l\nk\n10 30\n", tag: "1", cmd: CmdLock, key: "k"},
		{in: "#a7 sl " + sid + "\nk @x.1\n0 3\n", tag: "a7", ses: sid, cmd: CmdSemLock, key: "k", id: "x.1"},
		{in: "#z r\r\nk\r\n" + tok + "\r\n", tag: "z", cmd: CmdRelease, key: "k"},
		{in: "#t session\n_\n\n", tag: "t", cmd: CmdSession, key: "_"},
		{in: "#t bogus\nk\n\n", tag: "t", err: ErrUnknownCmd},
		{in: "#c cancel\nk\n\n", tag: "c", cmd: CmdCancel, key: "k"},
		{in: "#c cancel " + sid + "\na\nset\n", tag: "c", ses: sid, cmd: CmdCancel, key: "a"},
		{in: "#c cancel\nk\nall\n", tag: "c", err: ErrBadArg},
		{in: "#c cancel\nk @x.1\n\n", tag: "c", err: ErrBadKey},
		{in: "#t l \nk\n1\n", tag: "t", err: ErrUnknownCmd},
		{in: "#t l\nk\nx\n", tag: "t", cmd: CmdLock, key: "k", err: ErrBadInt},
		{in: "l\nk\n1\n", err: ErrBadTag},
		{in: "# l\nk\n1\n", err: ErrBadTag},
		{in: "#12345678901234567 l\nk\n1\n", err: ErrBadTag},
		{in: "#t\nk\n1\n", err: ErrBadTag},
	}
	for _, tc := range tests {
		var tr Tagged
		n, err := DecodeTagged([]byte(tc.in), &tr)
		if n != len(tc.in) || !errors.Is(err, tc.err) {
			t.Errorf("DecodeTagged(%q) = %d, %v; want %d, %v", tc.in, n, err, len(tc.in), tc.err)
			continue
		}
		if string(tr.Tag) != tc.tag {
			t.Errorf("DecodeTagged(%q): tag %q; want %q", tc.in, tr.Tag, tc.tag)
		}
		if err != nil {
			continue
		}
		if string(tr.Session) != tc.ses || tr.Cmd != tc.cmd || string(tr.Key) != tc.key || string(tr.ReqID) != tc.id {
			t.Errorf("DecodeTagged(%q) = %+v", tc.in, tr)
		}
	}
	var tr Tagged
	if n, err := DecodeTagged([]byte("#1 l\nk\n"), &tr); n != 0 || err != nil {
		t.Errorf("partial request: %d, %v", n, err)
	}
}

// TestCancelPlainUnknown: only the tagged decoder knows cancel; to the
// plain one it is any unknown command.
func TestCancelPlainUnknown(t *testing.T) {
	var req Request
	if n, err := Decode([]byte("cancel\nk\n\n"), &req); n == 0 || !errors.Is(err, ErrUnknownCmd) {
		t.Fatalf("Decode(cancel) = %d, %v; want ErrUnknownCmd", n, err)
	}
}

func TestTaggedGreeting(t *testing.T) {
	var req Request
	if _, err := Decode([]byte("tagged\n1\n\n"), &req); err != nil || req.Cmd != CmdTagged {
		t.Fatalf("greeting: %v %v", req.Cmd, err)
	}
	for _, in := range []string{"tagged\n2\n\n", "tagged\n1\nx\n"} {
		if _, err := Decode([]byte(in), &req); err == nil {
			t.Errorf("Decode(%q): no error", in)
		}
	}
	if CmdTagged.RW() || CmdTagged.Base() != CmdTagged || CmdTagged.Blocking() {
		t.Error("tagged is not a lock verb")
	}
}

func TestAppendTaggedRoundTrip(t *testing.T) {
	b := AppendTagged(nil, []byte("9"), CmdLock, []byte("s1"), []byte("k"), []byte("i.2"), []byte("5 30"))
	if want := "#9 l s1\nk @i.2\n5 30\n"; string(b) != want {
		t.Fatalf("AppendTagged = %q; want %q", b, want)
	}
	line := AppendStatus(AppendTag(nil, []byte("9")), StatusOK)
	tag, rest, ok := SplitTagged(bytes.TrimSuffix(line, []byte("\n")))
	if !ok || string(tag) != "9" || string(rest) != "ok" {
		t.Fatalf("SplitTagged(%q) = %q %q %v", line, tag, rest, ok)
	}
	for _, bad := range []string{"ok", "#", "# ok", "#a"} {
		if _, _, ok := SplitTagged([]byte(bad)); ok {
			t.Errorf("SplitTagged(%q) ok", bad)
		}
	}
}
