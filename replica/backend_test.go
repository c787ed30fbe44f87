package replica

import (
	"context"
	"errors"
	"testing"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
)

// TestBackendErr: the replica's errors reach the front ends as the
// backend's, and the engine's and context errors pass unchanged.
func TestBackendErr(t *testing.T) {
	tests := []struct {
		name string
		in   error
		want error
	}{
		{name: "unknown outcome", in: ErrUnknownOutcome, want: backend.ErrUnknownOutcome},
		{name: "closed", in: ErrClosed, want: backend.ErrUnknownOutcome},
		{name: "unknown server", in: ErrUnknownServer, want: backend.ErrUnknownMember},
		{name: "engine", in: engine.ErrMaxKeys, want: engine.ErrMaxKeys},
		{name: "deadline", in: context.DeadlineExceeded, want: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := backendErr(tt.in); !errors.Is(got, tt.want) {
				t.Fatalf("backendErr(%v) = %v; want %v", tt.in, got, tt.want)
			}
		})
	}
	var nl *backend.NotLeaderError
	got := backendErr(&NotLeaderError{LeaderID: "n2", ClientAddr: "a:1", HTTPAddr: "a:2"})
	if !errors.As(got, &nl) || nl.Leader != (backend.Leader{ClientAddr: "a:1", HTTPAddr: "a:2"}) {
		t.Fatalf("backendErr(not leader) = %v; want a *backend.NotLeaderError naming a:1 and a:2", got)
	}
	if backendErr(nil) != nil {
		t.Fatal("backendErr(nil) != nil")
	}
}

// TestCommandOf: each backend request becomes the log entry for its
// engine call; a release carries no owner, a session's key rides in Salt.
func TestCommandOf(t *testing.T) {
	tok := fence.Token{Fence: 9, Salt: 3}
	tests := []struct {
		name string
		in   backend.Request
		want Command
	}{
		{name: "acquire", in: backend.Request{Op: backend.OpAcquire, Key: []byte("k"), Owner: 4, Limit: 2, Client: 4},
			want: Command{Op: OpAcquire, Key: []byte("k"), Owner: 4, Limit: 2, Client: 4}},
		{name: "release", in: backend.Request{Op: backend.OpRelease, Key: []byte("k"), Owner: 4, Token: tok},
			want: Command{Op: OpRelease, Key: []byte("k"), Token: tok}},
		{name: "disconnect", in: backend.Request{Op: backend.OpDisconnect, Owner: 4, Release: true},
			want: Command{Op: OpDisconnect, Owner: 4, Release: true}},
		{name: "open session", in: backend.Request{Op: backend.OpOpenSession, Owner: 5, SessionKey: 77},
			want: Command{Op: OpOpenSession, Owner: 5, Salt: 77}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := command(&tt.in)
			if !ok || got.Op != tt.want.Op || string(got.Key) != string(tt.want.Key) || got.Owner != tt.want.Owner ||
				got.Limit != tt.want.Limit || got.Token != tt.want.Token || got.Release != tt.want.Release ||
				got.Salt != tt.want.Salt || got.Client != tt.want.Client {
				t.Fatalf("command(%+v) = %+v, %v; want %+v", tt.in, got, ok, tt.want)
			}
		})
	}
	if _, ok := command(&backend.Request{Op: 0}); ok {
		t.Fatal("command accepted op 0")
	}
}
