package codec

import (
	"errors"
	"strings"
	"testing"
)

func TestAppendResponses(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{name: "grant", got: AppendGrant([]byte("x"), StatusOK, []byte(tok), 33), want: "xok " + tok + " 33\n"},
		{name: "acquired", got: AppendGrant(nil, StatusAcquired, []byte(tok), 1), want: "acquired " + tok + " 1\n"},
		{name: "remaining", got: AppendRemaining(nil, 12), want: "ok 12\n"},
		{name: "stats body", got: AppendBody(nil, StatusOK, []byte(`{"a": 1}`)), want: "ok {\"a\": 1}\n"},
		{name: "not leader", got: AppendBody(nil, StatusErrorNotLeader, []byte("10.0.0.2:6388")), want: "error_not_leader 10.0.0.2:6388\n"},
		{name: "invalid status", got: AppendStatus(nil, StatusInvalid), want: "error\n"},
		{name: "out of range status", got: AppendStatus(nil, Status(200)), want: "error\n"},
	}
	for s := StatusOK; s < numStatus; s++ {
		tests = append(tests, struct {
			name string
			got  []byte
			want string
		}{name: s.String(), got: AppendStatus([]byte("x"), s), want: "x" + s.String() + "\n"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Fatalf("got %q; want %q", tt.got, tt.want)
			}
		})
	}
}

func TestDecodeResponse(t *testing.T) {
	const stats = `{"connections":1,"locks":[{"key":"a","owner_conn_id":3}],"idle_s": 2}`
	tests := []struct {
		name       string
		in         string
		wantN      int // 0: len(in)
		wantErr    error
		wantStatus Status
		wantToken  string
		wantNum    int64
		wantBody   string
	}{
		{name: "grant", in: "ok " + tok + " 33\n", wantStatus: StatusOK, wantToken: tok, wantNum: 33, wantBody: tok + " 33"},
		{name: "acquired", in: "acquired " + tok + " 30\n", wantStatus: StatusAcquired, wantToken: tok, wantNum: 30, wantBody: tok + " 30"},
		{name: "grant CRLF", in: "ok " + tok + " 33\r\n", wantStatus: StatusOK, wantToken: tok, wantNum: 33, wantBody: tok + " 33"},
		{name: "remaining", in: "ok 33\n", wantStatus: StatusOK, wantNum: 33, wantBody: "33"},
		{name: "bare ok", in: "ok\n", wantStatus: StatusOK},
		{name: "stats json without spaces", in: "ok {}\n", wantStatus: StatusOK, wantBody: "{}"},
		{name: "stats json with a space", in: `ok {"a": 1}` + "\n", wantStatus: StatusOK, wantBody: `{"a": 1}`},
		{name: "stats json with spaces", in: `ok {"a": "b c d"}` + "\n", wantStatus: StatusOK, wantBody: `{"a": "b c d"}`},
		{name: "stats json", in: "ok " + stats + "\n", wantStatus: StatusOK, wantBody: stats},
		{name: "queued", in: "queued\n", wantStatus: StatusQueued},
		{name: "timeout", in: "timeout\n", wantStatus: StatusTimeout},
		{name: "error", in: "error\n", wantStatus: StatusError},
		{name: "error CRLF", in: "error\r\n", wantStatus: StatusError},
		{name: "error_auth", in: "error_auth\n", wantStatus: StatusErrorAuth},
		{name: "error_max_locks", in: "error_max_locks\n", wantStatus: StatusErrorMaxLocks},
		{name: "error_max_waiters", in: "error_max_waiters\n", wantStatus: StatusErrorMaxWaiters},
		{name: "error_limit_mismatch", in: "error_limit_mismatch\n", wantStatus: StatusErrorLimitMismatch},
		{name: "not leader", in: "error_not_leader 10.0.0.2:6388\n", wantStatus: StatusErrorNotLeader, wantBody: "10.0.0.2:6388"},
		{name: "error_not_enqueued", in: "error_not_enqueued\n", wantStatus: StatusErrorNotEnqueued},
		{name: "error_already_enqueued", in: "error_already_enqueued\n", wantStatus: StatusErrorAlreadyEnqueued},
		{name: "error_lease_expired", in: "error_lease_expired\n", wantStatus: StatusErrorLeaseExpired},
		{name: "first of two lines", in: "queued\nok 1\n", wantN: 7, wantStatus: StatusQueued},
		{name: "incomplete", in: "ok " + tok, wantN: -1},
		{name: "empty", in: "", wantN: -1},
		{name: "garbage", in: "hello world\n", wantErr: ErrBadResponse},
		{name: "empty line", in: "\n", wantErr: ErrBadResponse},
		{name: "upper case", in: "OK\n", wantErr: ErrBadResponse},
		{name: "acquired without token", in: "acquired\n", wantErr: ErrBadResponse},
		{name: "acquired without ttl", in: "acquired " + tok + "\n", wantErr: ErrBadResponse},
		{name: "acquired bad ttl", in: "acquired " + tok + " x\n", wantErr: ErrBadResponse},
		{name: "grant bad ttl", in: "ok " + tok + " x\n", wantErr: ErrBadResponse},
		{name: "ok three words", in: "ok a b c\n", wantErr: ErrBadResponse},
		{name: "acquired json", in: "acquired {a b c}\n", wantErr: ErrBadResponse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp Response
			n, err := DecodeResponse([]byte(tt.in), &resp)
			wantN := tt.wantN
			switch wantN {
			case 0:
				wantN = len(tt.in)
			case -1:
				wantN = 0
			}
			if n != wantN || !errors.Is(err, tt.wantErr) {
				t.Fatalf("DecodeResponse(%q) = %d, %v; want %d, %v", tt.in, n, err, wantN, tt.wantErr)
			}
			if n == 0 || err != nil {
				return
			}
			if resp.Status != tt.wantStatus || string(resp.Token) != tt.wantToken || resp.N != tt.wantNum || string(resp.Body) != tt.wantBody {
				t.Fatalf("DecodeResponse(%q) = %v %q %d %q; want %v %q %d %q", tt.in,
					resp.Status, resp.Token, resp.N, resp.Body, tt.wantStatus, tt.wantToken, tt.wantNum, tt.wantBody)
			}
		})
	}
}

func TestStatusString(t *testing.T) {
	seen := map[string]bool{}
	for s := StatusOK; s < numStatus; s++ {
		w := s.String()
		if w == "" || seen[w] || strings.ContainsAny(w, " \n") || lookupStatus([]byte(w)) != s {
			t.Errorf("status %d: word %q", s, w)
		}
		seen[w] = true
	}
	if StatusInvalid.String() != "" || Status(200).String() != "" {
		t.Error("invalid statuses have words")
	}
}
