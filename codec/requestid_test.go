package codec

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeRequestID checks the optional request id on the key line
// (docs/protocol.md "Request ids"): split off when well-formed, every
// other key with a space still a bad key, as dflockd clients rely on.
func TestDecodeRequestID(t *testing.T) {
	id64 := strings.Repeat("a", MaxRequestID)
	tests := []struct {
		name    string
		in      string
		wantKey string
		wantID  string
		wantErr error
	}{
		{name: "lock with id", in: "l\nk1 @abc-1\n10\n", wantKey: "k1", wantID: "abc-1"},
		{name: "release with id", in: "r\nk1 @x\n" + tok + "\n", wantKey: "k1", wantID: "x"},
		{name: "renew with id CRLF", in: "n\r\nk1 @7f.2\r\n" + tok + " 9\r\n", wantKey: "k1", wantID: "7f.2"},
		{name: "id of 64 bytes", in: "e\nk @" + id64 + "\n\n", wantKey: "k", wantID: id64},
		{name: "no id", in: "l\nk1\n10\n", wantKey: "k1"},
		{name: "key with space", in: "l\na b\n10\n", wantErr: ErrBadKey},
		{name: "empty id", in: "l\nk @\n10\n", wantErr: ErrBadKey},
		{name: "id of 65 bytes", in: "l\nk @" + id64 + "a\n10\n", wantErr: ErrBadKey},
		{name: "two spaces", in: "l\nk  @x\n10\n", wantErr: ErrBadKey},
		{name: "id with space", in: "l\nk @x y\n10\n", wantErr: ErrBadKey},
		{name: "id with tab", in: "l\nk @x\ty\n10\n", wantErr: ErrBadKey},
		{name: "no key", in: "l\n @x\n10\n", wantErr: ErrBadKey},
		{name: "bad key before id", in: "l\na\tb @x\n10\n", wantErr: ErrBadKey},
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
			if string(req.Key) != tt.wantKey || string(req.ReqID) != tt.wantID || (tt.wantID == "") != (req.ReqID == nil) {
				t.Errorf("Decode(%q) = key %q id %q; want %q %q", tt.in, req.Key, req.ReqID, tt.wantKey, tt.wantID)
			}
			again := AppendRequestID(nil, req.Cmd, req.Key, req.ReqID, req.Arg)
			if string(again) != strings.ReplaceAll(tt.in, "\r", "") {
				t.Errorf("AppendRequestID = %q; want %q", again, tt.in)
			}
		})
	}
}

// TestDecodeSession checks the session request's forms.
func TestDecodeSession(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantKey string
		wantArg string
		wantErr error
	}{
		{name: "new", in: "session\n_\n\n", wantKey: "_"},
		{name: "attach", in: "session\n0123456789abcdef0123456789abcdef\n\n", wantKey: "0123456789abcdef0123456789abcdef"},
		{name: "close", in: "session\nabc\nclose\n", wantKey: "abc", wantArg: "close"},
		{name: "other arg", in: "session\nabc\nopen\n", wantErr: ErrBadArg},
		{name: "no key", in: "session\n\n\n", wantErr: ErrBadKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req Request
			n, err := Decode([]byte(tt.in), &req)
			if n != len(tt.in) || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Decode(%q) = %d, %v; want %d, %v", tt.in, n, err, len(tt.in), tt.wantErr)
			}
			if err == nil && (req.Cmd != CmdSession || string(req.Key) != tt.wantKey || string(req.Arg) != tt.wantArg) {
				t.Errorf("Decode(%q) = %v %q %q", tt.in, req.Cmd, req.Key, req.Arg)
			}
		})
	}
}
