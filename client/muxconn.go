package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latchd/latchd/codec"
)

// muxConn is one tagged connection of a Mux, dialled again when it breaks.
// Callers queue requests in wq and register them in pending; whichever
// caller finds no write under way becomes the writer, and sends
// everything queued in one write, again until wq stays empty: what others
// queue meanwhile goes out together (one write per flush). The reader
// (run) hands each answer to the caller its tag names. While it hands out
// the answers of one read it holds the write turn itself, and it writes
// once after the callers it woke have had a turn to run: on a busy key the
// release of the caller just granted and the next acquire of the caller
// just released leave in one write, as they came in one read.
type muxConn struct {
	m    *Mux
	addr int // index in m.addrs of the server to dial next

	mu      sync.Mutex
	nc      net.Conn
	br      *bufio.Reader
	sess    []byte // the session field of every request; nil for none
	isUp    bool
	wq      []byte
	spare   []byte // the buffer the writer gives back
	writing bool   // a caller is writing: it sends what is queued too
	pending map[uint64]*muxCall
	tag     uint64
	leader  string // run only: the leader a not-leader answer named
}

// muxCall is one request waiting for its answer.
type muxCall struct {
	ch        chan struct{} // one slot: r and err are set
	r         reply
	err       error
	cmd       codec.Cmd
	key       string // the key line, without the request id
	id        string // the request id; "" for none
	arg       []byte // with an id: the argument line, to send it again
	abandoned bool   // under mu: the caller left; a grant is released
	// redo, for a request the Mux sends on its own behalf (a cancel, the
	// release of an abandoned grant), sends it again when it is lost: its
	// connection broke before the answer, or a node that no longer leads
	// answered it (muxcleanup.go).
	redo func()
}

func (c *muxConn) up() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.isUp
}

// do sends one request, with the request id rid if not "", and waits for
// its answer: up to wait (a blocking request's timeout) plus the I/O
// timeout, or until ctx is done. A blocking request with an id whose
// connection breaks is left waiting on the server, for the caller to send
// it again (muxretry.go), or to withdraw it if ctx ended too.
func (c *muxConn) do(ctx context.Context, cmd codec.Cmd, key, rid string, arg []byte, wait time.Duration) (reply, error) {
	call := &muxCall{ch: make(chan struct{}, 1), cmd: cmd, key: key, id: rid}
	if rid != "" {
		call.arg = arg
	}
	c.mu.Lock()
	if !c.isUp {
		c.mu.Unlock()
		return reply{}, fmt.Errorf("%w: reconnecting", ErrClosed)
	}
	id := c.queueIDLocked(cmd, key, rid, arg)
	c.pending[id] = call
	c.flushLocked()
	var timeout <-chan time.Time
	if io := c.m.opts.ioTimeout; io > 0 {
		t := time.NewTimer(wait + io)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-call.ch:
		return call.r, call.err
	case <-ctx.Done():
		if !c.abandon(id, call, true) {
			<-call.ch // answered meanwhile: a grant is released all the same
			if call.err == nil {
				c.dropGrant(call)
			} else if withdrawable(cmd) {
				go c.m.withdraw(call) // its connection broke first
			}
		}
		return reply{}, ctx.Err()
	case <-timeout:
		if !c.abandon(id, call, false) {
			<-call.ch // answered after all
			return call.r, call.err
		}
		err := fmt.Errorf("%w: no answer to %s within %v", ErrClosed, cmd, wait+c.m.opts.ioTimeout)
		c.broken(err)
		if withdrawable(cmd) && rid == "" {
			c.m.withdraw(call) // with an id, the caller sends it again
		}
		return reply{}, err
	}
}

// queueLocked appends a tagged request to wq and returns its tag number.
func (c *muxConn) queueLocked(cmd codec.Cmd, key string, arg []byte) uint64 {
	return c.queueIDLocked(cmd, key, "", arg)
}

// queueIDLocked is queueLocked for a request with the request id rid ("":
// none) on its key line.
func (c *muxConn) queueIDLocked(cmd codec.Cmd, key, rid string, arg []byte) uint64 {
	c.tag++
	var tb [16]byte
	tag := strconv.AppendUint(tb[:0], c.tag, 36)
	sess := c.sess
	if cmd == codec.CmdSession || cmd == codec.CmdStats {
		sess = nil
	}
	c.wq = codec.AppendTagged(c.wq, tag, cmd, sess, []byte(key), []byte(rid), arg)
	return c.tag
}

// abandon leaves a call: when its answer is a grant, it is released. With
// cancel, a request that may still wait on the server (an acquire, a
// wait, a set) is withdrawn: abandon sends the cancel request
// (muxcancel.go) and does not wait for its answer. It reports false when
// the call was answered already: its answer is on call.ch, or on its way.
func (c *muxConn) abandon(id uint64, call *muxCall, cancel bool) bool {
	c.mu.Lock()
	if c.pending[id] != call {
		c.mu.Unlock()
		return false
	}
	call.abandoned = true
	if !withdrawable(call.cmd) || !cancel {
		c.mu.Unlock()
		return true
	}
	if !c.isUp {
		c.mu.Unlock()
		go c.m.withdraw(call) // on the next connection up
		return true
	}
	c.queueCancelLocked(call)
	c.flushLocked()
	return true
}

// flushLocked sends what is queued unless another caller is sending it
// already, and unlocks mu. Between writes mu is free, so callers keep
// queueing: each write takes all of it.
func (c *muxConn) flushLocked() {
	if c.writing {
		c.mu.Unlock()
		return
	}
	c.writing = true
	c.flushHeldLocked()
}

// flushHeldLocked sends what is queued, for a caller that set writing, and
// unlocks mu.
func (c *muxConn) flushHeldLocked() {
	for len(c.wq) > 0 && c.isUp {
		buf, nc := c.wq, c.nc
		c.wq = c.spare[:0]
		c.mu.Unlock()
		_, err := nc.Write(buf)
		c.mu.Lock()
		c.spare = buf
		if err != nil {
			c.writing = false
			c.mu.Unlock()
			c.broken(err)
			return
		}
	}
	c.writing = false
	c.mu.Unlock()
}

// run reads answers until the connection breaks, then dials again, until
// the Mux closes.
func (c *muxConn) run() {
	for {
		c.mu.Lock()
		br := c.br
		c.mu.Unlock()
		c.broken(c.read(br))
		for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
			if c.m.isClosed() {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), max(c.m.opts.dialTimeout, time.Second))
			err := c.connectAny(ctx)
			cancel()
			if err == nil {
				break
			}
			select {
			case <-c.m.quit:
				return
			case <-time.After(backoff):
			}
		}
	}
}

// read hands answers to their callers until an error.
func (c *muxConn) read(br *bufio.Reader) error {
	var long []byte
	held := false // the reader holds the write turn for the callers it wakes
	defer func() {
		if held {
			c.mu.Lock()
			c.flushHeldLocked()
		}
	}()
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil {
			return err
		}
		tag, _, ok := codec.SplitTagged(line[:len(line)-1])
		if !ok {
			return fmt.Errorf("%w: untagged answer %q", ErrProtocol, line)
		}
		id, perr := strconv.ParseUint(string(tag), 36, 64)
		var resp codec.Response
		_, derr := codec.DecodeResponse(line[len(tag)+2:], &resp)
		if perr != nil || derr != nil {
			return fmt.Errorf("%w: answer %q", ErrProtocol, line)
		}
		c.mu.Lock()
		if !held && !c.writing {
			held, c.writing = true, true
		}
		call := c.pending[id]
		delete(c.pending, id)
		abandoned := call != nil && call.abandoned
		c.mu.Unlock()
		if call != nil {
			call.r = reply{Status: resp.Status, Token: string(resp.Token), N: resp.N, Body: string(resp.Body)}
			if abandoned && resp.Status == codec.StatusErrorNotLeader {
				c.m.redo(call)
			} else if abandoned {
				c.dropGrant(call)
			} else {
				call.ch <- struct{}{}
			}
		}
		if held && !lineBuffered(br) {
			// The batch is handed out. Let the callers it woke run
			// first (on this P), so that what they send next goes
			// out in this one write.
			held = false
			runtime.Gosched()
			c.mu.Lock()
			c.flushHeldLocked()
		}
		if resp.Status == codec.StatusErrorNotLeader {
			// Leadership moved: dial the leader it names.
			c.leader = strings.TrimSpace(string(resp.Body))
			return &NotLeaderError{Leader: c.leader}
		}
	}
}

// lineBuffered reports whether br holds a whole line: reading it will not
// wait for the network.
func lineBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// dropGrant releases the grant an abandoned acquire or wait got.
func (c *muxConn) dropGrant(call *muxCall) {
	if call.cmd.Multi() {
		c.dropSet(call)
		return
	}
	b := call.cmd.Base()
	if call.r.Status != codec.StatusOK || !validGrant(call.r) ||
		(b != codec.CmdLock && b != codec.CmdSemLock && b != codec.CmdWait && b != codec.CmdSemWait) {
		return
	}
	rel := codec.CmdRelease
	if call.cmd.Semaphore() {
		rel = codec.CmdSemRelease
	}
	c.releaseAll(rel, []string{call.key}, []string{call.r.Token})
}

// broken closes the connection and fails the calls waiting on it.
func (c *muxConn) broken(cause error) {
	c.mu.Lock()
	if !c.isUp {
		c.mu.Unlock()
		return
	}
	c.isUp = false
	nc, pending := c.nc, c.pending
	c.pending = make(map[uint64]*muxCall)
	c.wq = c.wq[:0]
	c.mu.Unlock()
	_ = nc.Close()
	err := fmt.Errorf("%w: %w", ErrClosed, cause)
	if errors.Is(cause, ErrClosed) {
		err = cause
	}
	for _, call := range pending {
		if !call.abandoned {
			call.err = err
			call.ch <- struct{}{}
		} else {
			c.m.redo(call)
		}
	}
}

// shut breaks the connection for good (the Mux is closing).
func (c *muxConn) shut(cause error) { c.broken(cause) }

// connectAny connects to the leader a not-leader answer named, else to
// the next of the Mux's addresses that takes the connection.
func (c *muxConn) connectAny(ctx context.Context) error {
	if lead := c.leader; lead != "" {
		c.leader = ""
		if c.connect(ctx, lead) == nil {
			return nil
		}
	}
	var err error
	for range c.m.addrs {
		if err = c.connect(ctx, c.m.addrs[c.addr]); err == nil {
			return nil
		}
		var nl *NotLeaderError
		if errors.As(err, &nl) && nl.Leader != "" && c.connect(ctx, nl.Leader) == nil {
			return nil
		}
		c.addr = (c.addr + 1) % len(c.m.addrs)
	}
	return err
}

// connect dials the server, greets it into tagged mode and attaches the
// Mux's session (opening it on the first connection).
func (c *muxConn) connect(ctx context.Context, addr string) error {
	conn, err := Dial(ctx, addr, func(o *options) { *o = c.m.opts })
	if err != nil {
		return err
	}
	r, err := conn.roundTrip(ctx, codec.CmdTagged, codec.TaggedVersion, nil, 0, nil)
	if err == nil && r.Status != codec.StatusOK {
		err = fmt.Errorf("%w: %s has no tagged mode (answered %q)", ErrProtocol, addr, r.Status.String())
	}
	var sess string
	if err == nil {
		if dl, ok := ctx.Deadline(); ok {
			err = conn.nc.SetDeadline(dl)
		}
	}
	if err == nil {
		sess, err = c.m.attach(ctx, conn)
	}
	if err == nil {
		err = conn.nc.SetDeadline(time.Time{}) // the reader waits as long as it must
	}
	if err != nil {
		_ = conn.Close()
		return err
	}
	c.mu.Lock()
	c.nc, c.br, c.isUp = conn.nc, conn.br, true
	c.sess = nil
	if sess != "" {
		c.sess = []byte(sess)
	}
	c.mu.Unlock()
	return nil
}

// attach attaches the Mux's session to a tagged conn that no goroutine
// reads yet, opening a new session when it has none or its own is gone.
// It returns the session id, "" when the server offers none.
func (m *Mux) attach(ctx context.Context, conn *Conn) (string, error) {
	m.mu.Lock()
	sess, none := m.session, m.noSess
	m.mu.Unlock()
	if none {
		return "", nil
	}
	if sess != "" {
		r, err := tagExchange(conn, sess)
		if err != nil || r.Status == codec.StatusOK {
			return sess, err
		}
		if r.Status == codec.StatusErrorNotLeader {
			return "", errorFor(r, nil)
		}
	}
	r, err := tagExchange(conn, codec.SessionNew)
	switch {
	case err != nil:
		return "", err
	case r.Status == codec.StatusErrorNotLeader:
		return "", errorFor(r, nil)
	case r.Status != codec.StatusOK || len(r.Token) != 32:
		m.mu.Lock()
		m.noSess = sess == "" // a server without sessions
		m.mu.Unlock()
		return "", nil
	}
	m.mu.Lock()
	m.session, m.orphan = r.Token, time.Duration(r.N)*time.Second
	m.mu.Unlock()
	return r.Token, nil
}

// tagExchange sends a tagged session request for id on conn and reads its
// answer.
func tagExchange(conn *Conn, id string) (reply, error) {
	conn.wbuf = codec.AppendTagged(conn.wbuf[:0], []byte("0"), codec.CmdSession, nil, []byte(id), nil, nil)
	if _, err := conn.nc.Write(conn.wbuf); err != nil {
		return reply{}, err
	}
	line, err := conn.readLine()
	if err != nil {
		return reply{}, err
	}
	tag, _, ok := codec.SplitTagged([]byte(strings.TrimRight(string(line), "\r\n")))
	var resp codec.Response
	if !ok || string(tag) != "0" {
		return reply{}, fmt.Errorf("%w: session answered %q", ErrProtocol, line)
	}
	if _, err := codec.DecodeResponse(line[len(tag)+2:], &resp); err != nil {
		return reply{}, fmt.Errorf("%w: session answered %q", ErrProtocol, line)
	}
	return reply{Status: resp.Status, Token: string(resp.Token), N: resp.N, Body: string(resp.Body)}, nil
}
