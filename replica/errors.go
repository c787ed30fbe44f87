package replica

import (
	"errors"
	"fmt"
)

// ErrUnknownOutcome means a command entered the log but leadership was
// lost before it committed: a later leader may or may not apply it (a
// grant nobody heard of runs out with its lease).
var ErrUnknownOutcome = errors.New("replica: outcome unknown: leadership lost after the command was logged")

var (
	// ErrNotLeader means this node is not the leader (or has not yet
	// taken over as one): mutating commands go to the leader. The error
	// a Node returns is a *NotLeaderError naming it, when known.
	ErrNotLeader = errors.New("replica: not leader")
	// ErrBadCommand means a log entry does not decode as a Command.
	ErrBadCommand = errors.New("replica: bad command")
	// ErrBadSnapshot means a snapshot is not one an FSM wrote.
	ErrBadSnapshot = errors.New("replica: bad snapshot")
	// ErrClosed means the Node was shut down.
	ErrClosed = errors.New("replica: node closed")
)

// NotLeaderError is ErrNotLeader with what this node knows of the leader;
// the fields are empty when no leader is known (an election is running).
type NotLeaderError struct {
	LeaderID   string // the leader's raft server ID
	RaftAddr   string // its raft address
	ClientAddr string // where clients reach it: the address error_not_leader names
	// HTTPAddr is where the leader serves the REST API, as it announced
	// in its Restamp entry; empty if it serves none or this node has not
	// applied that entry yet. The REST API's 503 not_leader names it.
	HTTPAddr string
}

// Error says who the leader is.
func (e *NotLeaderError) Error() string {
	if e.ClientAddr == "" && e.LeaderID == "" {
		return "replica: not leader; no leader known"
	}
	return fmt.Sprintf("replica: not leader; leader is %s at %s", e.LeaderID, e.ClientAddr)
}

// Is makes errors.Is(err, ErrNotLeader) true.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }
