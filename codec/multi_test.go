package codec

import "testing"

func TestDecodeMulti(t *testing.T) {
	var req Request
	n, err := Decode([]byte("ml\na b c\n5 30\n"), &req)
	if err != nil || n == 0 || req.Cmd != CmdMultiLock || req.Timeout != 5 || req.TTL != 30 {
		t.Fatalf("ml: n=%d err=%v req=%+v", n, err, req)
	}
	var keys [MaxKeys][]byte
	if k, ok := SplitKeys(req.Key, keys[:]); !ok || k != 3 || string(keys[2]) != "c" {
		t.Fatalf("SplitKeys = %d, %v", k, ok)
	}
	if _, err := Decode([]byte("msl\na b\n0 3\n"), &req); err != nil || req.Limit != 3 || !req.Cmd.Multi() {
		t.Fatalf("msl: %v %+v", err, req)
	}
	for _, bad := range []string{"ml\n\n5\n", "ml\na b\n\n", "msl\na\n5\n", "ml\na\n-1\n",
		"ml\na b c d e f g h i j k l m n o p q\n1\n"} {
		if _, err := Decode([]byte(bad), &req); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

func TestDecodeMultiGrant(t *testing.T) {
	var resp Response
	line := "ok 00000000000000010000000000000002 00000000000000030000000000000004 30\n"
	if _, err := DecodeResponse([]byte(line), &resp); err != nil || resp.Status != StatusOK || resp.N != 30 {
		t.Fatalf("%v %+v", err, resp)
	}
	var toks [2][]byte
	ttl, ok := SplitGrants(resp.Body, toks[:])
	if !ok || ttl != 30 || string(toks[1]) != "00000000000000030000000000000004" {
		t.Fatalf("SplitGrants = %d %v %q", ttl, ok, toks)
	}
	var one [1][]byte
	if _, ok := SplitGrants(resp.Body, one[:]); ok {
		t.Fatal("SplitGrants accepted the wrong count")
	}
}
