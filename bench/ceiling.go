package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/latchd/latchd/codec"
	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// CeilingToken is the token every Ceiling grant carries.
const CeilingToken = "00000000000000010123456789abcdef"

// CeilingConfig configures a Ceiling. Build it from DefaultCeilingConfig.
type CeilingConfig struct {
	// Addr is the listen address; port 0 picks a free port.
	Addr string
	// EventLoops is the number of gnet event loops; 0 means one per core.
	EventLoops int
}

// DefaultCeilingConfig listens on a free loopback port with one event loop
// per core.
func DefaultCeilingConfig() CeilingConfig { return CeilingConfig{Addr: "127.0.0.1:0"} }

// Validate reports a setting that cannot run.
func (c CeilingConfig) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("bench: ceiling address %q: %w", c.Addr, err)
	}
	if c.EventLoops < 0 {
		return errors.New("bench: ceiling event loops must be >= 0")
	}
	return nil
}

// Ceiling is a trivial gnet responder: it answers every complete
// three-line request at once with a canned answer and keeps no state, so
// driving it measures what the transport allows, the upper bound for any
// server of the protocol. A bad line gets "error" and a close.
type Ceiling struct {
	gnet.BuiltinEventEngine

	cfg    CeilingConfig
	eng    gnet.Engine
	addr   string
	booted chan struct{}
	done   chan error
	conns  atomic.Int64
	reqs   atomic.Int64
}

// StartCeiling checks cfg, listens, and returns once the listener accepts
// connections.
func StartCeiling(cfg CeilingConfig) (*Ceiling, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Ceiling{cfg: cfg, booted: make(chan struct{}), done: make(chan error, 1)}
	opts := []gnet.Option{
		gnet.WithReuseAddr(true),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(errorLogger()), // no start-up banner on stdout
	}
	if c.cfg.EventLoops > 0 {
		opts = append(opts, gnet.WithNumEventLoop(c.cfg.EventLoops))
	} else {
		opts = append(opts, gnet.WithMulticore(true))
	}
	go func() { c.done <- gnet.Run(c, "tcp://"+c.cfg.Addr, opts...) }()
	select {
	case <-c.booted:
	case err := <-c.done:
		if err == nil {
			err = errors.New("gnet stopped at start")
		}
		return nil, fmt.Errorf("bench: ceiling: %w", err)
	}
	addr, err := listenAddr(c.eng)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("bench: ceiling: %w", err)
	}
	c.addr = addr
	return c, nil
}

// errorLogger logs gnet's errors, and nothing else, to stderr.
func errorLogger() *zap.SugaredLogger {
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(os.Stderr), zap.ErrorLevel)).Sugar()
}

// listenAddr returns the address the engine's listener got.
func listenAddr(eng gnet.Engine) (string, error) {
	fd, err := eng.Dup()
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), "ceiling listener")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Addr returns the address the Ceiling listens on.
func (c *Ceiling) Addr() string { return c.addr }

// Connections returns the number of open connections.
func (c *Ceiling) Connections() int { return int(c.conns.Load()) }

// Requests returns how many requests the Ceiling has answered.
func (c *Ceiling) Requests() int64 { return c.reqs.Load() }

// Close closes the listener and every connection and waits, five seconds
// at most, for gnet to return (gnet polls for that every 500 ms).
func (c *Ceiling) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.eng.Stop(ctx); err != nil {
		return err
	}
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// OnBoot implements gnet.EventHandler.
func (c *Ceiling) OnBoot(eng gnet.Engine) gnet.Action {
	c.eng = eng
	close(c.booted)
	return gnet.None
}

// ceilingConn is one connection's output buffer; event loop only.
type ceilingConn struct{ out []byte }

// OnOpen implements gnet.EventHandler.
func (c *Ceiling) OnOpen(conn gnet.Conn) ([]byte, gnet.Action) {
	c.conns.Add(1)
	conn.SetContext(&ceilingConn{out: make([]byte, 0, 4096)})
	return nil, gnet.None
}

// OnClose implements gnet.EventHandler.
func (c *Ceiling) OnClose(gnet.Conn, error) gnet.Action {
	c.conns.Add(-1)
	return gnet.None
}

var (
	ceilGrant    = []byte("ok " + CeilingToken + " 33\n")
	ceilAcquired = []byte("acquired " + CeilingToken + " 33\n")
	ceilRenewed  = []byte("ok 33\n")
	ceilOK       = []byte("ok\n")
	ceilStats    = []byte(`ok {"connections":0,"locks":[],"semaphores":[],"idle_locks":[],"idle_semaphores":[]}` + "\n")
	ceilError    = []byte("error\n")
)

// OnTraffic implements gnet.EventHandler: answer every complete request in
// the inbound buffer with one write.
func (c *Ceiling) OnTraffic(conn gnet.Conn) gnet.Action {
	cc := conn.Context().(*ceilingConn)
	buf, _ := conn.Peek(-1)
	out := cc.out[:0]
	used, n := 0, int64(0)
	action := gnet.None
	for {
		ans, adv, ok := ceilingAnswer(buf[used:])
		if !ok {
			out, action = append(out, ceilError...), gnet.Close
			break
		}
		if adv == 0 {
			break
		}
		out = append(out, ans...)
		used += adv
		n++
	}
	if used > 0 {
		_, _ = conn.Discard(used) // never Discard(0): it empties the whole buffer
	}
	c.reqs.Add(n) // before the answers leave: a client that has them sees them counted
	if len(out) > 0 {
		_, _ = conn.Write(out)
	}
	cc.out = out[:0]
	return action
}

// ceilingAnswer frames the first request of b: adv == 0 means incomplete;
// !ok means the stream is invalid (an over-long line or unknown command).
func ceilingAnswer(b []byte) (ans []byte, adv int, ok bool) {
	var cmd []byte
	for line := range 3 {
		i := bytes.IndexByte(b[adv:], '\n')
		if i < 0 {
			return nil, 0, len(b)-adv <= codec.MaxLine+1
		}
		if i > codec.MaxLine+1 {
			return nil, 0, false
		}
		if line == 0 {
			cmd = bytes.TrimSuffix(b[:i], []byte{'\r'})
		}
		adv += i + 1
	}
	switch string(cmd) {
	case "l", "sl", "w", "sw":
		return ceilGrant, adv, true
	case "e", "se":
		return ceilAcquired, adv, true
	case "n", "sn":
		return ceilRenewed, adv, true
	case "r", "sr", "auth":
		return ceilOK, adv, true
	case "stats":
		return ceilStats, adv, true
	}
	return nil, 0, false
}
