package codec

// The read-write lock verbs: r (read, shared) or w (write, exclusive)
// followed by the lock verb they stand for (l, r, n, e, w). Each takes
// the arguments of its lock verb and gets the same answers.

// rwBase maps each read-write command to its lock form.
var rwBase = [...]Cmd{
	CmdReadLock - CmdReadLock: CmdLock, CmdWriteLock - CmdReadLock: CmdLock,
	CmdReadRelease - CmdReadLock: CmdRelease, CmdWriteRelease - CmdReadLock: CmdRelease,
	CmdReadRenew - CmdReadLock: CmdRenew, CmdWriteRenew - CmdReadLock: CmdRenew,
	CmdReadEnqueue - CmdReadLock: CmdEnqueue, CmdWriteEnqueue - CmdReadLock: CmdEnqueue,
	CmdReadWait - CmdReadLock: CmdWait, CmdWriteWait - CmdReadLock: CmdWait,
}

// Base returns the lock command a read-write command stands for (CmdLock
// for rl and wl, CmdRelease for rr and wr, ...), and any other command
// itself.
func (c Cmd) Base() Cmd {
	if c < CmdReadLock || c > CmdWriteWait {
		return c
	}
	return rwBase[c-CmdReadLock]
}

// RW reports whether c is one of the read-write commands.
func (c Cmd) RW() bool { return c >= CmdReadLock && c <= CmdWriteWait }

// Write reports whether c is a write (exclusive) read-write command.
func (c Cmd) Write() bool { return c.RW() && (c-CmdReadLock)%2 == 1 }

func lookupRW(b []byte) Cmd {
	if len(b) != 2 || (b[0] != 'r' && b[0] != 'w') {
		return CmdInvalid
	}
	var c Cmd
	switch b[1] {
	case 'l':
		c = CmdReadLock
	case 'r':
		c = CmdReadRelease
	case 'n':
		c = CmdReadRenew
	case 'e':
		c = CmdReadEnqueue
	case 'w':
		c = CmdReadWait
	default:
		return CmdInvalid
	}
	if b[0] == 'w' {
		c++
	}
	return c
}
