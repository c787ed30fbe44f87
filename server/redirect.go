package server

// A connection the server has answered error_not_leader may be closed by
// its client, which then renews its grants by token on the leader. The
// close must not release them, even if this node leads again by then:
// Disconnect withdraws the connection's waits and leaves its grants to
// their leases, as when the server stops.

// noteRedirect records that ss was answered err, when err sends it to
// another node. The engine's errors, the usual ones, cost no allocation.
func (ss *session) noteRedirect(err error) {
	if _, engine := statusFor(err); engine {
		return
	}
	if _, ok := notLeader(err); ok {
		ss.redirected.Store(true)
	}
}
