package server

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/panjf2000/gnet/v2/pkg/netpoll"
)

// procLoops is what the raw idle wait depends on across the process: the
// setting is one for every gnet poller (netpoll.SetRawIdleWait), so it is
// on only when, of all the servers running gnet loops here, there is one
// loop in all and its server wants it.
var procLoops struct {
	sync.Mutex
	loops int // event loops of the running servers
	off   int // running servers with LoopRawWait off
}

// trackRawWait adds (delta 1) or removes (-1) the server's loops from the
// process's count, or only re-applies the rule (0: GOMAXPROCS can change
// at run time, e.g. with the container's CPU limit), and sets the poller.
func (s *Server) trackRawWait(delta int) {
	procLoops.Lock()
	defer procLoops.Unlock()
	procLoops.loops += delta * s.nLoops
	if !s.cfg.LoopRawWait {
		procLoops.off += delta
	}
	netpoll.SetRawIdleWait(rawIdleWait(procLoops.loops, procLoops.off == 0))
}

// rawIdleWait is the rule of Config.RawIdleWait for loops event loops.
func rawIdleWait(loops int, want bool) bool {
	return want && loops == 1 && runtime.GOMAXPROCS(0) >= 2 && !asyncPreemptOff()
}

// asyncPreemptOff reports whether GODEBUG turns the runtime's asynchronous
// preemption off, read as the runtime reads it: the last well-formed
// asyncpreemptoff=N wins, and any N but 0 turns it off.
func asyncPreemptOff() bool {
	off := false
	for _, kv := range strings.Split(os.Getenv("GODEBUG"), ",") {
		if v, ok := strings.CutPrefix(kv, "asyncpreemptoff="); ok {
			if n, err := strconv.ParseInt(v, 10, 32); err == nil {
				off = n != 0
			}
		}
	}
	return off
}
