package httpfast

import (
	"context"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// GET /v1/admin/snapshot: an online backup of the state, behind the
// admin token, on a single node as on a cluster node (latchctl snapshot
// save writes what it answers to a file).

// SnapshotFunc returns a backup file of the state (internal/backupfile):
// replica.Node.Backup on a cluster node, replica.EngineBackup on a single
// node. Its errors are the backend's.
type SnapshotFunc func(ctx context.Context) ([]byte, error)

// WithSnapshot serves GET /v1/admin/snapshot with fn, guarded by the admin
// token (which must not be empty, and is the one WithAdmin names when
// both are given). It works without WithAdmin: a single node has no
// membership, but can be backed up.
func WithSnapshot(fn SnapshotFunc, token string) Option {
	return func(o *options) { o.snapshot, o.snapToken = fn, token }
}

// snapshotWait bounds the ReadIndex and the copy of one backup.
const snapshotWait = adminWait

// applySnapshotOption sets up WithSnapshot; New calls it.
func (s *Server) applySnapshotOption(o *options) bool {
	if o.snapshot == nil {
		return true
	}
	if o.snapToken == "" {
		return false
	}
	s.snapshot = o.snapshot
	if s.adminAuth == nil {
		s.adminAuth = []byte("Bearer " + o.snapToken)
	}
	return true
}

// matchAdminRoute is matchAdmin for what this server serves: the
// snapshot route alone without WithAdmin.
func (s *Server) matchAdminRoute(method, path []byte) (o op, param []byte, allow string) {
	if string(path) == "/v1/admin/snapshot" && s.snapshot != nil {
		return only(string(method), "GET", opAdminSnapshot, nil)
	}
	if s.admin == nil {
		return opNotFound, nil, ""
	}
	return matchAdmin(method, path) // the snapshot route is not among its routes
}

// serveSnapshot answers GET /v1/admin/snapshot with a backup file.
func (s *Server) serveSnapshot(ctx *fasthttp.RequestCtx) {
	cctx, cancel := context.WithTimeout(context.Background(), snapshotWait)
	defer cancel()
	b, err := s.snapshot(cctx)
	if err != nil {
		if !failBackend(ctx, err) {
			s.log.Error("admin snapshot", zap.Error(err))
			writeError(ctx, errInternal, "snapshot failed: "+err.Error())
		}
		return
	}
	s.log.Info("snapshot sent", zap.Int("bytes", len(b)), zap.String("to", ctx.RemoteAddr().String()))
	ctx.Response.Header.SetContentType("application/octet-stream")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetBody(b)
}
