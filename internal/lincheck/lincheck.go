// Package lincheck records histories of lock operations against a latchd
// cluster and checks them for linearizability with porcupine, against a
// sequential model of a lock with fencing. The in-process cluster tests
// and the chaos run (make chaos) share it.
//
// The model assumes what those runs arrange: leases longer than the run
// (no grant expires) and no release on disconnect, so every state change
// is a recorded operation. A request whose connection broke after it was
// sent has an unknown outcome: the model lets it take effect or not.
package lincheck

import (
	"bufio"
	"cmp"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/latchd/latchd/fence"
)

// Input is one operation: 'l' try-lock, 'n' renew, 'r' release, 'g' a
// read of the key's state (RecordRead).
type Input struct {
	Op    byte
	Key   string
	Token string // 'n', 'r': the token; 'l': an op id naming a ghost holder
}

// Output is what the operation answered.
type Output struct {
	OK      bool
	Unknown bool // the connection broke after the request was sent
	Token   string
	Fence   uint64
	// Renewed: a read found the holder's lease renewed (Worker renews
	// for twice the grant's lease, so a read tells the two apart).
	Renewed bool
}

// state is one key's: its holder ("" when free), the highest fence
// granted on it, and whether the holder renewed its lease.
type state struct {
	holder  string
	fence   uint64
	renewed bool
}

// Model is a lock with fencing: a free key must be granted, a held one
// refused; a grant's fence is above every earlier grant's on the key;
// renew and release succeed exactly for the holder's token; a read sees
// the holder's fence and whether it renewed.
var Model = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(Input).Key
			by[k] = append(by[k], op)
		}
		return slices.Collect(maps.Values(by))
	},
	Init: func() []any { return []any{state{}} },
	Step: func(st, input, output any) []any {
		s, in, out := st.(state), input.(Input), output.(Output)
		var applied state // the state if the operation took effect
		switch in.Op {
		case 'g':
			if readFits(s, out) {
				return []any{s}
			}
			return nil
		case 'l':
			if out.Unknown {
				if s.holder == "" {
					return []any{s, state{holder: "ghost-" + in.Token, fence: s.fence}}
				}
				return []any{s}
			}
			if out.OK {
				if s.holder != "" || out.Fence <= s.fence {
					return nil
				}
				return []any{state{holder: out.Token, fence: out.Fence}}
			}
			if s.holder == "" {
				return nil // a free lock must be granted
			}
			return []any{s}
		case 'r':
			applied = s
			if s.holder == in.Token {
				applied.holder, applied.renewed = "", false
			}
		case 'n':
			applied = s
			applied.renewed = applied.renewed || s.holder == in.Token
		default:
			return nil
		}
		if out.Unknown {
			return []any{s, applied}
		}
		if out.OK != (s.holder == in.Token) {
			return nil
		}
		return []any{applied}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		return fmt.Sprintf("%c %s %s -> %+v", in.Op, in.Key, in.Token, out)
	},
}

// readFits reports whether a read's answer fits state s. A holder whose
// grant had an unknown outcome (a ghost) has some fence above the last
// known one, and never renews (Worker renews only what it saw granted).
func readFits(s state, out Output) bool {
	switch {
	case !out.OK:
		return s.holder == ""
	case s.holder == "":
		return false
	case strings.HasPrefix(s.holder, "ghost-"):
		return out.Fence > s.fence && !out.Renewed
	}
	return out.Fence == s.fence && out.Renewed == s.renewed
}

// Recorder collects a history from many goroutines.
type Recorder struct {
	base time.Time
	mu   sync.Mutex
	ops  []porcupine.Operation
	errs []string
}

// NewRecorder starts a history now.
func NewRecorder() *Recorder { return &Recorder{base: time.Now()} }

// Now is the recorder's timestamp: call it before sending a request.
func (r *Recorder) Now() int64 { return int64(time.Since(r.base)) }

// Record adds an operation called at call that answered line ("" for an
// unknown outcome).
func (r *Recorder) Record(client int, in Input, call int64, line string) {
	out, ret := Output{}, r.Now()
	switch {
	case line == "":
		out.Unknown, ret = true, math.MaxInt64
	case strings.HasPrefix(line, "ok"):
		out.OK = true
		if in.Op == 'l' {
			f := strings.Fields(line)
			if len(f) != 3 {
				r.fail("bad grant %q", line)
				return
			}
			tok, err := fence.ParseString(f[1])
			if err != nil {
				r.fail("bad grant %q", line)
				return
			}
			out.Token, out.Fence = f[1], tok.Fence
		}
	case line == "timeout" || line == "error":
	default:
		r.fail("unexpected answer %q to %c", line, in.Op)
		return
	}
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
}

// RecordRead adds a read of key called at call that found it held with
// fence (renewed: its lease was renewed) or free (held false). Read after
// the other operations have returned, it checks that none that was
// acknowledged is missing from the state read.
func (r *Recorder) RecordRead(client int, key string, call int64, held bool, fence uint64, renewed bool) {
	op := porcupine.Operation{ClientId: client, Input: Input{Op: 'g', Key: key}, Call: call,
		Output: Output{OK: held, Fence: fence, Renewed: renewed}, Return: r.Now()}
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

func (r *Recorder) fail(format string, args ...any) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// Len returns how many operations were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Errors returns the answers that fit no operation.
func (r *Recorder) Errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

// Result is a check's outcome.
type Result struct {
	Ops, Unknown, Grants int
	Verdict              porcupine.CheckResult
	Visualization        string // an HTML file showing the history, when it is not linearizable
	Dump                 string // a text file with the first key's history that is not
}

// Check checks the history within timeout.
func (r *Recorder) Check(timeout time.Duration, dir string) Result {
	r.mu.Lock()
	ops := slices.Clone(r.ops)
	r.mu.Unlock()
	res := Result{Ops: len(ops)}
	for _, op := range ops {
		out := op.Output.(Output)
		if out.Unknown {
			res.Unknown++
		}
		if out.OK && op.Input.(Input).Op == 'l' {
			res.Grants++
		}
	}
	m := Model.ToModel()
	var info porcupine.LinearizationInfo
	res.Verdict, info = porcupine.CheckOperationsVerbose(m, ops, timeout)
	if res.Verdict == porcupine.Illegal && dir != "" {
		res.Dump = dumpIllegal(m, ops, dir)
		p := filepath.Join(dir, "history.html")
		if f, err := os.Create(p); err == nil {
			if porcupine.Visualize(m, info, f) == nil {
				res.Visualization = p
			}
			_ = f.Close()
		}
	}
	return res
}

// dumpIllegal writes, for the first key whose history is not
// linearizable, its operations in call order to a text file.
func dumpIllegal(m porcupine.Model, ops []porcupine.Operation, dir string) string {
	for _, part := range m.Partition(ops) {
		if porcupine.CheckOperations(m, part) {
			continue
		}
		slices.SortFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		var b strings.Builder
		for _, op := range part {
			ret := "?"
			if op.Return != math.MaxInt64 {
				ret = time.Duration(op.Return).String()
			}
			fmt.Fprintf(&b, "%-12v %-12s client %-3d %s\n", time.Duration(op.Call), ret, op.ClientId,
				Model.DescribeOperation(op.Input, op.Output))
		}
		p := filepath.Join(dir, "illegal.txt")
		if os.WriteFile(p, []byte(b.String()), 0o644) == nil {
			return p
		}
	}
	return ""
}

// Client talks to whichever member leads, following error_not_leader.
// One goroutine only.
type Client struct {
	Addrs []string
	// Dial connects to a member; nil means net.DialTimeout with a second.
	Dial func(addr string) (net.Conn, error)
	next int
	c    net.Conn
	br   *bufio.Reader
}

// NewClient returns a client over the members' addresses, starting with
// the first'th.
func NewClient(addrs []string, first int) *Client { return &Client{Addrs: addrs, next: first} }

// Close closes the connection.
func (lc *Client) Close() {
	if lc.c != nil {
		_ = lc.c.Close()
		lc.c = nil
	}
}

func (lc *Client) connect(addr string) {
	lc.Close()
	if addr == "" {
		addr = lc.Addrs[lc.next%len(lc.Addrs)]
		lc.next++
	}
	dial := lc.Dial
	if dial == nil {
		dial = func(a string) (net.Conn, error) { return net.DialTimeout("tcp", a, time.Second) }
	}
	c, err := dial(addr)
	if err != nil {
		return
	}
	lc.c, lc.br = c, bufio.NewReader(c)
}

// Do runs one request until a member that leads answers it, or deadline
// passes. It returns the answer, "" when the connection broke after the
// request was sent (unknown outcome), and whether it was ever sent to a
// member that could have run it.
func (lc *Client) Do(req string, deadline time.Time) (line string, sent bool) {
	for time.Now().Before(deadline) {
		if lc.c == nil {
			lc.connect("")
			if lc.c == nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
		}
		_ = lc.c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := lc.c.Write([]byte(req)); err != nil {
			lc.connect("")
			return "", true // part of it may have reached the member
		}
		s, err := lc.br.ReadString('\n')
		if err != nil {
			lc.connect("")
			return "", true
		}
		s = strings.TrimSuffix(s, "\n")
		if rest, ok := strings.CutPrefix(s, "error_not_leader"); ok {
			leader := strings.TrimSpace(rest)
			lc.connect(leader)
			if leader == "" {
				time.Sleep(20 * time.Millisecond)
			}
			continue
		}
		return s, true
	}
	return "", false
}

// Worker runs try-lock, renew, release rounds on keys (keys picks a
// round's) until stop is closed, recording each operation. ttl must
// outlast the run (the model has no expiry); renewals ask for twice ttl,
// so that a read can tell a renewed lease. h sees each round.
func Worker(id int, lc *Client, rec *Recorder, keys func() string, ttl time.Duration, stop <-chan struct{}, h Hooks) {
	secs := int64(ttl / time.Second)
	defer lc.Close()
	if h.Done == nil {
		h.Done = func(int64, bool) {}
	}
	if h.Granted == nil {
		h.Granted = func(string, string) {}
	}
	if h.Releasing == nil {
		h.Releasing = func(string) {}
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		key := keys()
		in := Input{Op: 'l', Key: key, Token: fmt.Sprint(id, "-", rec.Now())}
		call := rec.Now()
		line, sent := lc.Do(fmt.Sprintf("l\n%s\n0 %d\n", key, secs), time.Now().Add(5*time.Second))
		if !sent {
			continue
		}
		rec.Record(id, in, call, line)
		tok := "0000000000000001aaaaaaaaaaaaaaaa" // a stale token, when not granted
		f := strings.Fields(line)
		granted := len(f) == 3 && f[0] == "ok"
		h.Done(call, granted)
		if granted {
			tok = f[1]
			h.Granted(key, tok)
		}
		for _, req := range []string{fmt.Sprintf("n\n%s\n%s %d\n", key, tok, 2*secs), fmt.Sprintf("r\n%s\n%s\n", key, tok)} {
			if req[0] == 'r' && granted {
				h.Releasing(key)
			}
			call := rec.Now()
			if line, sent := lc.Do(req, time.Now().Add(5*time.Second)); sent {
				rec.Record(id, Input{Op: req[0], Key: key, Token: tok}, call, line)
				h.Done(call, false)
			}
		}
	}
}

// Hooks see a Worker's rounds; each may be nil. Done follows each
// recorded operation (granted: a lock that was granted), Granted a grant,
// with its token, and Releasing comes before a granted round's release is
// sent.
type Hooks struct {
	Done      func(call int64, granted bool)
	Granted   func(key, tok string)
	Releasing func(key string)
}
