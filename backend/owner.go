package backend

import "github.com/latchd/latchd/engine"

// SessionBit marks the owner ids of REST sessions (httpfast); a TCP
// connection's id never has it.
const SessionBit = engine.OwnerID(1) << 63

// OwnerKind names what an owner id is, as events and the dashboard show
// it: "session" (a REST session), "conn" (a TCP connection) or "-" (none).
func OwnerKind(id engine.OwnerID) string {
	switch {
	case id == 0:
		return "-"
	case id&SessionBit != 0:
		return "session"
	}
	return "conn"
}
