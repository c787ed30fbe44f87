//go:build !linux

package httpfast

import "syscall"

// canWatch: no peerGone here yet; a parked REST request whose client
// leaves stays queued until it is granted or times out.
const canWatch = false

func peerGone(syscall.RawConn) bool { return false }
