package httpfast

import (
	"errors"

	"github.com/latchd/latchd/engine"
)

var (
	// ErrStarted means Start was called on a server already started.
	ErrStarted = errors.New("httpfast: server already started")
	// ErrNotStarted means Stop was called before Start.
	ErrNotStarted = errors.New("httpfast: server not started")
)

// apiErr is an error answer of the REST API: a status code and the
// "error" string of the JSON body. The OpenAPI document lists every one.
type apiErr uint8

const (
	errBadRequest apiErr = iota
	errUnauthorized
	errNotFound
	errMethodNotAllowed
	errNotHolder
	errLimitMismatch
	errAlreadyEnqueued
	errNotEnqueued
	errLeaseExpired
	errSessionRequired
	errSessionGone
	errBodyTooLarge
	errMaxLocks
	errMaxWaiters
	errMaxSessions
	errRateLimited
	errInternal
	errNotLeader      // cluster mode: a follower; writeNotLeader adds "leader"
	errUnknownOutcome // cluster mode: logged, then leadership lost
	errUnavailable    // cluster mode: not taken in; it did not take effect
	errShuttingDown   // a single node draining for a stop: no new grants
	errClientGone     // the client closed its connection while parked; nobody reads it
	errTooManyWatchers
)

var apiErrs = [...]struct {
	status int
	code   string
}{
	errBadRequest:       {400, "bad_request"},
	errUnauthorized:     {401, "unauthorized"},
	errNotFound:         {404, "not_found"},
	errMethodNotAllowed: {405, "method_not_allowed"},
	errNotHolder:        {409, "not_holder"},
	errLimitMismatch:    {409, "limit_mismatch"},
	errAlreadyEnqueued:  {409, "already_enqueued"},
	errNotEnqueued:      {409, "not_enqueued"},
	errLeaseExpired:     {409, "lease_expired"},
	errSessionRequired:  {400, "session_required"},
	errSessionGone:      {410, "session_gone"},
	errBodyTooLarge:     {413, "body_too_large"},
	errMaxLocks:         {429, "max_locks"},
	errMaxWaiters:       {429, "max_waiters"},
	errMaxSessions:      {429, "max_sessions"},
	errRateLimited:      {429, "rate_limited"},
	errInternal:         {500, "internal"},
	errNotLeader:        {503, "not_leader"},
	errUnknownOutcome:   {503, "unknown_outcome"},
	errUnavailable:      {503, "unavailable"},
	errShuttingDown:     {503, "shutting_down"},
	errClientGone:       {499, "client_gone"},
	errTooManyWatchers:  {429, "max_watchers"},
}

// msgShuttingDown explains errShuttingDown.
const msgShuttingDown = "the server is stopping: it grants nothing more; releases and renewals still work"

// engineErrs maps the engine's errors to their answers and messages, in
// the order they are tried.
var engineErrs = [...]struct {
	err error
	e   apiErr
	msg string
}{
	{engine.ErrNotHolder, errNotHolder, "token does not hold the key (released, expired or never granted)"},
	{engine.ErrLimitMismatch, errLimitMismatch, "the key exists with another limit"},
	{engine.ErrAlreadyQueued, errAlreadyEnqueued, "this session already holds or waits on the key"},
	{engine.ErrNotQueued, errNotEnqueued, "this session has not enqueued on the key"},
	{engine.ErrLeaseExpired, errLeaseExpired, "the enqueued grant's lease ran out before this wait"},
	{engine.ErrOwnerMaxKeys, errMaxLocks, "this session holds or waits on its maximum number of keys (--max-keys-per-owner)"},
	{engine.ErrMaxKeys, errMaxLocks, "the server holds its maximum number of keys"},
	{engine.ErrMaxWaiters, errMaxWaiters, "the key's queue is full"},
	{engine.ErrMaxSessions, errMaxSessions, "the server holds its maximum number of sessions"},
	{engine.ErrBadRequest, errBadRequest, "request fields out of range"},
	{engine.ErrDraining, errShuttingDown, msgShuttingDown},
}

// apiErrFor maps an engine error to its answer and message. It is the one
// place where engine errors meet the REST API.
func apiErrFor(err error) (apiErr, string) {
	for _, m := range engineErrs {
		if errors.Is(err, m.err) {
			return m.e, m.msg
		}
	}
	return errInternal, "internal error"
}
