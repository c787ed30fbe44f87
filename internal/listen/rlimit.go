package listen

import (
	"math"
	"syscall"
)

// RaiseNoFile raises the soft RLIMIT_NOFILE to the hard limit and returns
// the soft limit in force afterwards. (The Go runtime does the same at
// start on Linux; doing it here makes it explicit and gives the number.)
func RaiseNoFile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		want := lim
		want.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
			lim = want
		}
	}
	return lim.Cur, nil
}

// Margin is how many descriptors of a limit of n latchd keeps for itself:
// listeners, pollers, log and state files, the raft transport and the
// descriptor gnet duplicates while it takes a connection over. 32 plus
// 1/16 of the limit.
func Margin(n uint64) uint64 { return 32 + n/16 }

// DefaultCaps returns the connection caps latchd derives from a descriptor
// limit of n when --max-connections (tcp) or --http-max-connections (rest)
// is 0: the limit less Margin, split 3:1 between TCP and REST when the
// REST listener is on, all to TCP otherwise. Each cap is at least 1.
func DefaultCaps(n uint64, rest bool) (tcp, http int) {
	usable := uint64(1)
	if m := Margin(n); n > m+1 {
		usable = n - m
	}
	if !rest {
		return clampInt(usable), 0
	}
	return clampInt(max(usable*3/4, 1)), clampInt(max(usable/4, 1))
}

func clampInt(v uint64) int { return int(min(v, math.MaxInt)) }
