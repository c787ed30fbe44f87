package httpfast

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/latchd/latchd/backend"
)

// The admin API: cluster status, membership and leadership, under
// /v1/admin. Every route needs "Authorization: Bearer <admin token>", a
// token of its own (the client token does not open it, nor the other way
// round). Without WithAdmin the routes do not exist (404).

// WithAdmin serves the admin API for a, guarded by token (not empty):
// GET /v1/admin/cluster on any node, and the membership and leadership
// changes on the leader (a follower answers 503 not_leader).
func WithAdmin(a backend.Admin, token string) Option {
	return func(o *options) { o.admin = &adminOptions{admin: a, token: token} }
}

// adminWait bounds a membership change or a leadership transfer; when it
// ends first the change may still take effect (503 unknown_outcome).
const adminWait = 10 * time.Second

// matchAdmin maps an admin route like match does; the caller has found no
// other route.
func matchAdmin(method, path []byte) (o op, param []byte, allow string) {
	m := string(method)
	switch string(path) {
	case "/v1/admin/cluster":
		return only(m, "GET", opAdminCluster, nil)
	case "/v1/admin/voters":
		return only(m, "POST", opAdminAddVoter, nil)
	case "/v1/admin/leadership-transfer":
		return only(m, "POST", opAdminTransfer, nil)
	case "/v1/admin/state-digest":
		return only(m, "GET", opAdminDigest, nil)
	}
	if id, ok := bytes.CutPrefix(path, []byte("/v1/admin/voters/")); ok && len(id) > 0 && bytes.IndexByte(id, '/') < 0 {
		return only(m, "DELETE", opAdminRemoveVoter, id)
	}
	return opNotFound, nil, ""
}

// voterBody is POST /v1/admin/voters. Fields it does not know (such as
// the client_addr that latchd --join sends) are ignored.
type voterBody struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	// Learner adds the node as a non-voting member (AddLearner): it
	// catches up without counting toward the quorum; a later POST
	// without it promotes the node to voter.
	Learner bool `json:"learner"`
}

// transferBody is POST /v1/admin/leadership-transfer; all of it optional.
type transferBody struct {
	ID string `json:"id"`
}

// adminOp serves the /v1/admin routes.
func (s *Server) adminOp(ctx *fasthttp.RequestCtx, o op, param []byte) {
	n := s.admin
	if o == opAdminCluster {
		s.writeValue(ctx, fasthttp.StatusOK, n.ClusterStatus())
		return
	}
	if o == opAdminDigest {
		s.serveDigest(ctx)
		return
	}
	if !n.IsLeader() {
		writeNotLeader(ctx, n.LeaderAddrs().HTTPAddr)
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), adminWait)
	defer cancel()
	switch o {
	case opAdminAddVoter:
		var b voterBody
		if err := decodeBody(ctx.PostBody(), &b, false); err != nil {
			writeError(ctx, errBadRequest, err.Error())
			return
		}
		if b.ID == "" || b.RaftAddr == "" {
			writeError(ctx, errBadRequest, "id and raft_addr are required")
			return
		}
		existed := n.HasMember(b.ID)
		what := "voter"
		if b.Learner {
			what = "learner"
		}
		if err := n.AddMember(cctx, b.ID, b.RaftAddr, b.Learner); err != nil {
			s.adminFail(ctx, "add "+what, err)
			return
		}
		s.log.Info(what+" added", zap.String("id", b.ID), zap.String("raft_addr", b.RaftAddr))
		status := fasthttp.StatusCreated
		if existed {
			status = fasthttp.StatusOK // its address updated, or nothing changed
		}
		s.writeVoters(ctx, n, status)
	case opAdminRemoveVoter:
		var idBuf [maxKeyLen]byte
		raw, ok := decodeKey(&idBuf, param)
		if !ok {
			writeError(ctx, errBadRequest, "bad voter id")
			return
		}
		id := string(raw)
		if !n.HasMember(id) {
			writeError(ctx, errNotFound, "no such voter")
			return
		}
		if err := n.RemoveMember(cctx, id); err != nil {
			s.adminFail(ctx, "remove server", err)
			return
		}
		s.log.Info("server removed", zap.String("id", id))
		s.writeVoters(ctx, n, fasthttp.StatusOK)
	case opAdminTransfer:
		var b transferBody
		if err := decodeBody(ctx.PostBody(), &b, false); err != nil {
			writeError(ctx, errBadRequest, err.Error())
			return
		}
		if err := n.TransferLeader(cctx, b.ID); err != nil {
			s.adminFail(ctx, "transfer leadership", err)
			return
		}
		s.log.Info("leadership transferred", zap.String("to", b.ID))
		writeJSON(ctx, fasthttp.StatusOK, bodyOK)
	}
}

// adminVoters is the answer of a membership change.
type adminVoters struct {
	Status string `json:"status"`
	Voters any    `json:"voters"`
}

// writeVoters answers {"status":"ok","voters":[...]}: n's configuration
// once the change is committed.
func (s *Server) writeVoters(ctx *fasthttp.RequestCtx, n backend.Admin, status int) {
	s.writeValue(ctx, status, &adminVoters{Status: "ok", Voters: n.Voters()})
}

// writeValue answers status with v as JSON.
func (s *Server) writeValue(ctx *fasthttp.RequestCtx, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		s.log.Error("admin answer", zap.Error(err))
		writeError(ctx, errInternal, "cannot encode the answer")
		return
	}
	writeJSON(ctx, status, body)
}

// adminFail answers an admin call's error.
func (s *Server) adminFail(ctx *fasthttp.RequestCtx, what string, err error) {
	switch {
	case errors.Is(err, backend.ErrUnknownMember):
		writeError(ctx, errNotFound, "no such voter (or it is this node, the leader)")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		writeError(ctx, errUnknownOutcome, "the change did not complete in time: it may or may not take effect")
	case failBackend(ctx, err):
	default:
		s.log.Error("admin "+what, zap.Error(err))
		writeError(ctx, errInternal, what+" failed: "+err.Error())
	}
}
