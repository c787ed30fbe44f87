package server

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// writeTimeout bounds writing the refusal of a connection over a cap.
const writeTimeout = 10 * time.Second

// tlsPeer is the peer of a TLS connection: Wake nudges its goroutine.
type tlsPeer struct {
	c    net.Conn
	wake chan struct{} // one slot: pending wakes merge
}

func (p *tlsPeer) Wake(gnet.AsyncCallback) error {
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

func (p *tlsPeer) Close() error { return p.c.Close() }

// serveTLS runs one TLS connection: a reader goroutine feeds bytes, and
// this goroutine plays the part of the connection's event loop, running
// the same process step as gnet's OnTraffic.
func (s *Server) serveTLS(c net.Conn) {
	p := &tlsPeer{c: c, wake: make(chan struct{}, 1)}
	ss, ok := s.open(c.RemoteAddr(), p)
	if !ok {
		_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, _ = c.Write([]byte("error\n"))
		_ = c.Close()
		return
	}
	if tc, ok := c.(*tls.Conn); ok {
		if tcp, ok := tc.NetConn().(*net.TCPConn); ok && s.cfg.SendBuffer > 0 {
			_ = tcp.SetWriteBuffer(s.cfg.SendBuffer)
		}
		_ = tc.SetDeadline(time.Now().Add(s.cfg.ReadTimeout))
		if err := tc.Handshake(); err != nil {
			_ = c.Close()
			s.close(ss, err)
			return
		}
		_ = tc.SetDeadline(time.Time{})
	}
	data := make(chan []byte)
	quit := make(chan struct{}) // closed when this goroutine stops taking data
	readerDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				chunk := append([]byte(nil), buf[:n]...)
				select {
				case data <- chunk:
				case <-quit:
					readerDone <- nil
					return
				}
			}
			if err != nil {
				close(data)
				readerDone <- err
				return
			}
		}
	}()
	var in []byte
	var err error
loop:
	for {
		select {
		case chunk, ok := <-data:
			if !ok {
				break loop
			}
			in = append(in, chunk...)
		case <-p.wake:
		case <-s.stop:
			break loop
		}
		used, out, closeNow := s.process(ss, in)
		in = in[:copy(in, in[used:])]
		if len(out) > 0 {
			if err = s.writeTLS(ss, c, out); err != nil {
				break
			}
		}
		ss.out = keep(out)
		if closeNow {
			break
		}
	}
	close(quit)
	_ = c.Close() // unblocks the reader's Read
	if rerr := <-readerDone; err == nil {
		err = rerr
	}
	s.close(ss, err)
}

// writeTLS writes one turn's answers. They count in the output budget
// while the write blocks; a write that cannot finish within WriteTimeout
// (the client stopped reading) closes the connection.
func (s *Server) writeTLS(ss *session, c net.Conn, out []byte) error {
	var dl time.Time
	if s.cfg.WriteTimeout > 0 {
		dl = time.Now().Add(s.cfg.WriteTimeout)
	}
	_ = c.SetWriteDeadline(dl)
	s.budget.Add(int64(len(out)))
	_, err := c.Write(out)
	s.budget.Add(-int64(len(out)))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		s.protocolError(ss, errWriteTimeout)
	}
	return err
}
