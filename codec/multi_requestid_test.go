package codec

import (
	"errors"
	"testing"
)

// TestDecodeMultiRequestID checks the request id of ml and msl
// (docs/protocol.md "Many keys at once"): a last word "@<id>" on line 2
// is the id, not a key; a lone word is always a key.
func TestDecodeMultiRequestID(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantKeys string
		wantID   string
		wantErr  error
	}{
		{name: "ml with id", in: "ml\na b @abc.1\n10\n", wantKeys: "a b", wantID: "abc.1"},
		{name: "msl with id", in: "msl\na b c @x\n0 3\n", wantKeys: "a b c", wantID: "x"},
		{name: "tab and trailing space", in: "ml\na\tb\t@x \n0\n", wantKeys: "a\tb", wantID: "x"},
		{name: "no id", in: "ml\na b\n10\n", wantKeys: "a b"},
		{name: "@ key not last", in: "ml\n@a b\n10\n", wantKeys: "@a b"},
		{name: "lone @ word is a key", in: "ml\n@a\n10\n", wantKeys: "@a"},
		{name: "empty id", in: "ml\na @\n10\n", wantErr: ErrBadKey},
		{name: "id of 65 bytes", in: "ml\na @" + string(make65()) + "\n10\n", wantErr: ErrBadKey},
		{name: "only an id", in: "ml\n @x\n10\n", wantErr: ErrBadKey},
		{name: "17 keys and an id", in: "ml\na b c d e f g h i j k l m n o p q @x\n1\n", wantErr: ErrBadKey},
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
			if string(req.Key) != tt.wantKeys || string(req.ReqID) != tt.wantID || (tt.wantID == "") != (req.ReqID == nil) {
				t.Fatalf("Decode(%q) = keys %q id %q; want %q %q", tt.in, req.Key, req.ReqID, tt.wantKeys, tt.wantID)
			}
			var again Request
			line := AppendRequestID(nil, req.Cmd, req.Key, req.ReqID, req.Arg)
			if _, err := Decode(line, &again); err != nil || !sameRequest(&req, &again) {
				t.Fatalf("re-encoded %q decodes as %+v, %v", line, again, err)
			}
		})
	}
}

func make65() []byte {
	b := make([]byte, MaxRequestID+1)
	for i := range b {
		b[i] = 'a'
	}
	return b
}
