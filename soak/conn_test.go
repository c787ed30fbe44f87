package soak

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/latchd/latchd/fence"
)

// Conn is one raw protocol connection: three-line requests out, one line
// per answer in. It is not safe for concurrent use.
type Conn struct {
	c    *net.TCPConn
	br   *bufio.Reader
	buf  []byte
	sent int64 // bytes written
}

// Dial connects to addr.
func Dial(addr string) (*Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return &Conn{c: c.(*net.TCPConn), br: bufio.NewReaderSize(c, 512)}, nil
}

// Send writes one request.
func (c *Conn) Send(cmd, key, arg string) error {
	c.buf = append(append(append(append(append(append(c.buf[:0], cmd...), '\n'), key...), '\n'), arg...), '\n')
	return c.Write(c.buf)
}

// Write writes raw bytes.
func (c *Conn) Write(b []byte) error {
	_ = c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	n, err := c.c.Write(b)
	c.sent += int64(n)
	return err
}

// ReadLine reads one answer line without its newline, waiting until
// deadline.
func (c *Conn) ReadLine(deadline time.Time) (string, error) {
	_ = c.c.SetReadDeadline(deadline)
	s, err := c.br.ReadString('\n')
	if err != nil {
		return s, err
	}
	return strings.TrimSuffix(s, "\n"), nil
}

// Do sends one request and reads its answer, waiting until deadline.
func (c *Conn) Do(cmd, key, arg string, deadline time.Time) (string, error) {
	if err := c.Send(cmd, key, arg); err != nil {
		return "", err
	}
	return c.ReadLine(deadline)
}

// Close closes the connection normally (FIN).
func (c *Conn) Close() error { return c.c.Close() }

// Abort closes the connection abruptly: with linger 0 the kernel sends a
// reset and keeps no TIME_WAIT state.
func (c *Conn) Abort() error {
	_ = c.c.SetLinger(0)
	return c.c.Close()
}

// CloseWrite shuts the write side down: the server reads end of stream
// while the client can still read.
func (c *Conn) CloseWrite() error { return c.c.CloseWrite() }

// WaitClosed reads until the server closes the connection or deadline
// passes. It returns the lines read and whether the connection closed.
func (c *Conn) WaitClosed(deadline time.Time) (lines []string, closed bool) {
	_ = c.c.SetReadDeadline(deadline)
	for {
		s, err := c.br.ReadString('\n')
		if err == nil {
			lines = append(lines, strings.TrimSuffix(s, "\n"))
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return lines, false
		}
		return lines, true // EOF or reset
	}
}

// IsTimeout reports whether err is a read or write deadline passing.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Answer is a parsed answer line.
type Answer struct {
	Word  string // ok, acquired, timeout, queued, error, error_*
	Token string // grants only
	Fence uint64 // grants only
	N     int64  // grants: the TTL; renewals: seconds remaining
}

// ParseAnswer parses a line. A grant ("ok <token> <ttl>" or "acquired
// <token> <ttl>") must carry a well-formed token.
func ParseAnswer(line string) (Answer, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return Answer{}, fmt.Errorf("empty answer")
	}
	a := Answer{Word: f[0]}
	switch len(f) {
	case 1:
		return a, nil
	case 2:
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || a.Word != "ok" {
			return a, fmt.Errorf("bad answer %q", line)
		}
		a.N = n
		return a, nil
	case 3:
		if a.Word != "ok" && a.Word != "acquired" {
			return a, fmt.Errorf("bad answer %q", line)
		}
		fn, err := fence.FenceOf(f[1])
		if err != nil {
			return a, fmt.Errorf("bad token in %q: %v", line, err)
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return a, fmt.Errorf("bad ttl in %q", line)
		}
		a.Token, a.Fence, a.N = f[1], fn, n
		return a, nil
	}
	return a, fmt.Errorf("bad answer %q", line)
}

// Grant reports whether a is a grant.
func (a Answer) Grant() bool { return a.Token != "" }
