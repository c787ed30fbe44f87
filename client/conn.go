package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/fence"
)

// Grant is a lease the server granted.
type Grant struct {
	// Token is the 32-hex fencing token; pass it to Release and Renew, and
	// to the protected resource (fence.SetHeader).
	Token string
	// TTL is the lease length; the lease ends TTL after the grant unless
	// renewed.
	TTL time.Duration
}

// Fence returns the fence number carried in g.Token.
func (g Grant) Fence() uint64 {
	f, _ := fence.FenceOf(g.Token) // Conn only returns grants whose token parsed
	return f
}

// Conn is one connection to a latchd server, with one method per protocol
// command. It is safe for concurrent use, but requests are serialised: one
// is in flight at a time, and a blocking one (Acquire, Wait, SemAcquire,
// SemWait) holds the Conn until it is answered, as the server holds the
// requests behind it.
//
// Everything a Conn holds or waits for belongs to the connection: closing
// it releases every lease it holds and withdraws every wait. The protocol
// has no cancel, so a canceled context closes the Conn (the server then
// withdraws the wait) and the call returns the context's error. After an
// I/O error, an expired context or a protocol error the Conn is closed and
// every later call returns an error wrapping ErrClosed.
type Conn struct {
	commands

	nc   net.Conn
	br   *bufio.Reader
	opts options
	addr string

	turn chan struct{} // one slot: the request in flight
	wbuf []byte        // turn holder only
	line []byte        // turn holder only: a response longer than br's buffer

	mu  sync.Mutex
	err error // why the Conn closed; nil while open
}

// Dial connects to the server at addr (host:port), performs the TLS
// handshake and sends the auth secret when so configured.
func Dial(ctx context.Context, addr string, opts ...Option) (*Conn, error) {
	o := newOptions(opts)
	if o.authToken != "" && (strings.ContainsAny(o.authToken, "\r\n") || len(o.authToken) > codec.MaxLine) {
		return nil, fmt.Errorf("%w: auth token must be one line of at most %d bytes", ErrBadRequest, codec.MaxLine)
	}
	dctx := ctx
	if o.dialTimeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, o.dialTimeout)
		defer cancel()
	}
	dial := o.dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(dctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	if o.tls != nil {
		cfg := o.tls.Clone()
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(dctx); err != nil {
			_ = nc.Close() // the handshake error is the one worth reporting
			return nil, fmt.Errorf("client: tls handshake with %s: %w", addr, err)
		}
		nc = tc
	}
	c := &Conn{
		nc:   nc,
		br:   bufio.NewReaderSize(nc, 4096),
		opts: o,
		addr: addr,
		turn: make(chan struct{}, 1),
	}
	c.commands = commands{c}
	if o.authToken != "" {
		if err := c.auth(dctx); err != nil {
			_ = c.Close() // already failed; the auth error is the one to report
			return nil, err
		}
	}
	return c, nil
}

// Addr returns the address the Conn was dialled with.
func (c *Conn) Addr() string { return c.addr }

// Close closes the connection; the server releases what it held and
// withdraws what it waited for. Close is idempotent.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil
	}
	c.err = ErrClosed
	return c.nc.Close()
}

// Err returns nil while the Conn is usable, else an error wrapping
// ErrClosed that tells why it closed.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail closes the Conn because of cause and returns the error to report.
func (c *Conn) fail(cause error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		if errors.Is(cause, ErrClosed) {
			c.err = cause
		} else {
			c.err = fmt.Errorf("%w: %w", ErrClosed, cause)
		}
		_ = c.nc.Close() // the cause is what matters
	}
	return cause
}

func (c *Conn) auth(ctx context.Context) error {
	r, err := c.roundTrip(ctx, codec.CmdAuth, "_", []byte(c.opts.authToken), 0, nil)
	if err != nil {
		return err
	}
	if r.Status != codec.StatusOK {
		// "error" means the server has no auth token configured.
		return c.fail(fmt.Errorf("%w: server answered %q", ErrAuth, r.Status.String()))
	}
	return nil
}

// reply is a decoded response that owns its bytes.
type reply struct {
	Status codec.Status
	Token  string
	N      int64
	Body   string
}

// roundTrip sends one request and reads its answer. wait is how long the
// server may legitimately take (a blocking request's timeout); the I/O
// timeout comes on top. sent, if not nil, is set once the whole request
// has been written: until then the server cannot have run it.
func (c *Conn) roundTrip(ctx context.Context, cmd codec.Cmd, key string, arg []byte, wait time.Duration, sent *bool) (reply, error) {
	return c.roundTripID(ctx, cmd, key, "", arg, wait, sent)
}

// roundTripID is roundTrip for a request that carries the request id rid
// on its key line (none when rid is empty).
func (c *Conn) roundTripID(ctx context.Context, cmd codec.Cmd, key, rid string, arg []byte, wait time.Duration, sent *bool) (reply, error) {
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return reply{}, ctx.Err()
	}
	defer func() { <-c.turn }()
	if err := c.Err(); err != nil {
		return reply{}, err
	}
	if err := ctx.Err(); err != nil {
		return reply{}, err // nothing sent yet: the Conn stays usable
	}

	var deadline time.Time
	if c.opts.ioTimeout > 0 {
		deadline = time.Now().Add(wait + c.opts.ioTimeout)
	}
	if err := c.nc.SetDeadline(deadline); err != nil {
		return reply{}, c.fail(err)
	}
	// The protocol has no cancel: a done context interrupts the I/O, and
	// the Conn is closed below, which makes the server withdraw the wait.
	interrupted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = c.nc.SetDeadline(time.Unix(1, 0)) // wakes the blocked read; its error is reported below
		close(interrupted)
	})
	r, err := c.exchange(cmd, key, rid, arg, sent)
	if !stop() {
		<-interrupted // its SetDeadline must not land on a later request
		if err != nil {
			return reply{}, c.fail(ctx.Err())
		}
	}
	if err != nil {
		return reply{}, c.fail(err)
	}
	return r, nil
}

// exchange writes one request and reads one response line. Turn holder
// only.
func (c *Conn) exchange(cmd codec.Cmd, key, rid string, arg []byte, sent *bool) (reply, error) {
	c.wbuf = codec.AppendRequestID(c.wbuf[:0], cmd, []byte(key), []byte(rid), arg)
	// A failed Write wrote less than the request: without its last newline
	// the server cannot run it.
	if _, err := c.nc.Write(c.wbuf); err != nil {
		return reply{}, err
	}
	if sent != nil {
		*sent = true
	}
	line, err := c.readLine()
	if err != nil {
		return reply{}, err
	}
	var resp codec.Response
	if _, err := codec.DecodeResponse(line, &resp); err != nil {
		return reply{}, fmt.Errorf("%w: %s answered %q: %v", ErrProtocol, cmd, line, err)
	}
	return reply{Status: resp.Status, Token: string(resp.Token), N: resp.N, Body: string(resp.Body)}, nil
}

// readLine returns the next line including its newline. The result aliases
// the Conn's buffers until the next read.
func (c *Conn) readLine() ([]byte, error) {
	line, err := c.br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	c.line = append(c.line[:0], line...) // only stats answers grow this long
	for errors.Is(err, bufio.ErrBufferFull) {
		line, err = c.br.ReadSlice('\n')
		c.line = append(c.line, line...)
	}
	return c.line, err
}

// stats runs the stats command (with the key line consistent: a
// linearizable one).
func (c *Conn) stats(ctx context.Context, consistent bool) (*Stats, error) {
	key := "_"
	if consistent {
		key = "consistent" // the server's read barrier first
	}
	r, err := c.roundTrip(ctx, codec.CmdStats, key, []byte("_"), 0, nil)
	if err != nil {
		return nil, err
	}
	if r.Status != codec.StatusOK {
		return nil, c.check(errorFor(r, ErrProtocol))
	}
	st := new(Stats)
	if err := json.Unmarshal([]byte(r.Body), st); err != nil {
		return nil, c.fail(fmt.Errorf("%w: stats: %v", ErrProtocol, err))
	}
	return st, nil
}

// cmds names the commands of one kind of key: locks or semaphores.
type cmds struct {
	acquire, release, renew, enqueue, wait codec.Cmd
	sem                                    bool
}

var (
	lockCmds = cmds{codec.CmdLock, codec.CmdRelease, codec.CmdRenew, codec.CmdEnqueue, codec.CmdWait, false}
	semCmds  = cmds{codec.CmdSemLock, codec.CmdSemRelease, codec.CmdSemRenew, codec.CmdSemEnqueue, codec.CmdSemWait, true}
)

func (c *Conn) acquire(ctx context.Context, k cmds, key string, limit int, timeout, ttl time.Duration) (Grant, error) {
	return c.acquireSent(ctx, k, key, "", limit, timeout, ttl, nil)
}

func (c *Conn) acquireSent(ctx context.Context, k cmds, key, rid string, limit int, timeout, ttl time.Duration, sent *bool) (Grant, error) {
	if err := checkKey(key, limit); err != nil {
		return Grant{}, err
	}
	var b [64]byte
	arg := strconv.AppendInt(b[:0], seconds(timeout), 10)
	if k.sem {
		arg = append(arg, ' ')
		arg = strconv.AppendInt(arg, int64(limit), 10)
	}
	arg = appendLockDelay(ctx, appendTTL(arg, ttl))
	r, err := c.roundTripID(ctx, k.acquire, key, rid, arg, time.Duration(seconds(timeout))*time.Second, sent)
	if err != nil {
		return Grant{}, err
	}
	// l has no bare "error" answer: a server that sends one is broken.
	return c.grant(r, codec.StatusOK, fmt.Errorf("%w: bare error to an acquire", ErrProtocol))
}

func (c *Conn) enqueue(ctx context.Context, k cmds, key string, limit int, ttl time.Duration) (Grant, bool, error) {
	return c.enqueueSent(ctx, k, key, "", limit, ttl, nil)
}

func (c *Conn) enqueueSent(ctx context.Context, k cmds, key, rid string, limit int, ttl time.Duration, sent *bool) (Grant, bool, error) {
	if err := checkKey(key, limit); err != nil {
		return Grant{}, false, err
	}
	var b [64]byte
	arg := b[:0]
	if k.sem {
		arg = strconv.AppendInt(arg, int64(limit), 10)
	}
	arg = appendLockDelay(ctx, appendTTL(arg, ttl))
	r, err := c.roundTripID(ctx, k.enqueue, key, rid, arg, 0, sent)
	if err != nil {
		return Grant{}, false, err
	}
	if r.Status == codec.StatusQueued {
		return Grant{}, false, nil
	}
	g, err := c.grant(r, codec.StatusAcquired, ErrAlreadyQueued)
	return g, err == nil, err
}

func (c *Conn) wait(ctx context.Context, k cmds, key string, timeout time.Duration) (Grant, error) {
	return c.waitSent(ctx, k, key, "", timeout, nil)
}

func (c *Conn) waitSent(ctx context.Context, k cmds, key, rid string, timeout time.Duration, sent *bool) (Grant, error) {
	if err := checkKey(key, 1); err != nil {
		return Grant{}, err
	}
	var b [24]byte
	arg := strconv.AppendInt(b[:0], seconds(timeout), 10)
	r, err := c.roundTripID(ctx, k.wait, key, rid, arg, time.Duration(seconds(timeout))*time.Second, sent)
	if err != nil {
		return Grant{}, err
	}
	return c.grant(r, codec.StatusOK, ErrNotQueued)
}

func (c *Conn) release(ctx context.Context, k cmds, key, token string) error {
	return c.releaseID(ctx, k, key, "", token)
}

func (c *Conn) releaseID(ctx context.Context, k cmds, key, rid, token string) error {
	if err := checkKeyToken(key, token); err != nil {
		return err
	}
	r, err := c.roundTripID(ctx, k.release, key, rid, []byte(token), 0, nil)
	if err != nil {
		return err
	}
	if r.Status != codec.StatusOK || r.Body != "" {
		return c.check(errorFor(r, ErrNotHolder))
	}
	return nil
}

func (c *Conn) renew(ctx context.Context, k cmds, key, token string, ttl time.Duration) (time.Duration, error) {
	return c.renewID(ctx, k, key, "", token, ttl)
}

func (c *Conn) renewID(ctx context.Context, k cmds, key, rid, token string, ttl time.Duration) (time.Duration, error) {
	if err := checkKeyToken(key, token); err != nil {
		return 0, err
	}
	arg := appendTTL([]byte(token), ttl)
	r, err := c.roundTripID(ctx, k.renew, key, rid, arg, 0, nil)
	if err != nil {
		return 0, err
	}
	if r.Status != codec.StatusOK || r.Token != "" {
		return 0, c.check(errorFor(r, ErrNotHolder))
	}
	return time.Duration(r.N) * time.Second, nil
}

// grant turns an answer into a Grant: ok is the status that carries one;
// onError is what a bare "error" means for the command.
func (c *Conn) grant(r reply, ok codec.Status, onError error) (Grant, error) {
	if r.Status != ok {
		return Grant{}, c.check(errorFor(r, onError))
	}
	if _, err := fence.ParseString(r.Token); err != nil || r.N <= 0 {
		return Grant{}, c.fail(fmt.Errorf("%w: bad grant %q %d", ErrProtocol, r.Token, r.N))
	}
	return Grant{Token: r.Token, TTL: time.Duration(r.N) * time.Second}, nil
}

// check closes the Conn when err leaves it unusable, and returns err: the
// server closes the connection after error_auth and after a protocol
// violation, and a broken stream cannot be resynchronised.
func (c *Conn) check(err error) error {
	if errors.Is(err, ErrAuth) || errors.Is(err, ErrProtocol) || errors.Is(err, ErrClosed) {
		return c.fail(err)
	}
	return err
}

func checkKey(key string, limit int) error {
	if !codec.ValidKey([]byte(key)) || len(key) > codec.MaxLine {
		return fmt.Errorf("%w: key %q must be 1 to %d bytes without whitespace", ErrBadRequest, key, codec.MaxLine)
	}
	if limit < 1 || limit > codec.MaxLimit {
		return fmt.Errorf("%w: limit %d out of range", ErrBadRequest, limit)
	}
	return nil
}

func checkKeyToken(key, token string) error {
	if err := checkKey(key, 1); err != nil {
		return err
	}
	if _, err := fence.ParseString(token); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return nil
}

// seconds rounds d up to whole seconds, within what the protocol accepts.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64((d + time.Second - 1) / time.Second)
	return min(s, codec.MaxSeconds)
}

// timedArg returns the argument line "<timeout-s>[ <rest>]" of a request
// that waits up to timeout.
func timedArg(timeout time.Duration, rest []byte) []byte {
	arg := strconv.AppendInt(make([]byte, 0, 24+len(rest)), seconds(timeout), 10)
	if len(rest) > 0 {
		arg = append(append(arg, ' '), rest...)
	}
	return arg
}

// appendTTL appends " <ttl>" in seconds, or nothing for the server default.
func appendTTL(arg []byte, ttl time.Duration) []byte {
	s := seconds(ttl)
	if s == 0 {
		return arg
	}
	if len(arg) > 0 {
		arg = append(arg, ' ')
	}
	return strconv.AppendInt(arg, s, 10)
}
