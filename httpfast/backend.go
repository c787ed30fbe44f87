package httpfast

import (
	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
)

// The handlers' calls to the backend (package backend): a single node's
// engine or a replicated node, which the handlers never tell apart. Each
// blocks the handler's goroutine (a fasthttp worker) until the backend
// answers; a replicated backend bounds that wait itself. The errors are
// the engine's and the backend's (*backend.NotLeaderError,
// backend.ErrUnknownOutcome, context errors), which Server.fail maps.

func (s *Server) closeSession(owner engine.OwnerID) (bool, error) {
	rep, err := s.be.Do(backend.Request{Op: backend.OpCloseSession, Owner: owner}, nil)
	return rep.OK, err
}

func (s *Server) beginSession(owner engine.OwnerID) (bool, error) {
	rep, err := s.be.Do(backend.Request{Op: backend.OpBeginSession, Owner: owner}, nil)
	return rep.OK, err
}

// endSession does not wait: the request it ends has its answer, and
// nobody could be told of a failure. On a replicated node a lost one
// (leadership changed meanwhile) leaves the session busy until the next
// leader's restamp makes it idle.
func (s *Server) endSession(owner engine.OwnerID) { s.be.EndSessionAsync(owner) }

// cancelWait withdraws owner's parked request on key: its sink hears
// Canceled, unless the request was answered first (engine.CancelWait).
func (s *Server) cancelWait(key []byte, owner engine.OwnerID) error {
	_, err := s.be.Do(backend.Request{Op: backend.OpCancelWait, Key: key, Owner: owner}, nil)
	return err
}

func (s *Server) release(key []byte, tok fence.Token) error { return s.releaseID(key, tok, nil) }

// releaseID is release carrying the request id rid (nil for none).
func (s *Server) releaseID(key []byte, tok fence.Token, rid []byte) error {
	_, err := s.be.Do(backend.Request{Op: backend.OpRelease, Key: key, Token: tok, ReqID: rid}, nil)
	return err
}

// disconnect withdraws everything owner waits for and, with release,
// releases everything it holds: disconnect(owner, true) is
// engine.DropOwner.
func (s *Server) disconnect(owner engine.OwnerID, release bool) error {
	_, err := s.be.Do(backend.Request{Op: backend.OpDisconnect, Owner: owner, Release: release}, nil)
	if err != nil {
		if ce := s.log.Check(zap.DebugLevel, "disconnect not applied"); ce != nil {
			ce.Write(zap.Uint64("owner", uint64(owner)), zap.Bool("release", release), zap.Error(err))
		}
	}
	return err
}
