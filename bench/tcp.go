package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/latchd/latchd/codec"
)

// tcpDriver speaks the three-line protocol over one connection. Requests
// are built with codec.AppendRequest into one reused buffer and answers are
// read with bufio.Reader.ReadSlice, so an op allocates nothing.
type tcpDriver struct {
	conn net.Conn
	rd   *bufio.Reader
	out  []byte
	resp codec.Response

	key      []byte
	acquire  codec.Cmd // l or sl
	release  codec.Cmd // r or sr
	acqArg   []byte    // "timeout [limit] [ttl]"
	twoPhase bool
	enqArg   []byte // e: "[ttl]"
	waitArg  []byte // w: "timeout"

	// held is the token of the grant to release next; empty when nothing
	// is held. With Config.Pipeline it goes out with the next acquire.
	pipeline bool
	held     []byte
	heldRel  codec.Cmd // the release verb of held's grant

	rw rwPick // ModeRW: reads or writes, per op
}

func dialTCP(ctx context.Context, cfg Config, addr string, w int) (driver, error) {
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	d := newTCPDriver(conn, cfg, w)
	if cfg.AuthToken != "" {
		if err := d.auth(ctx, cfg.AuthToken); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	return d, nil
}

func newTCPDriver(conn net.Conn, cfg Config, w int) *tcpDriver {
	d := &tcpDriver{
		conn:    conn,
		rd:      bufio.NewReaderSize(conn, 4096),
		out:     make([]byte, 0, 512),
		key:     cfg.key(w),
		acquire: codec.CmdLock,
		release: codec.CmdRelease,
		held:    make([]byte, 0, 64),
	}
	timeout := strconv.FormatInt(seconds(cfg.AcquireTimeout), 10)
	ttl := ""
	if cfg.LeaseTTL > 0 {
		ttl = " " + strconv.FormatInt(seconds(cfg.LeaseTTL), 10)
	}
	switch cfg.Mode {
	case ModeSem:
		d.acquire, d.release = codec.CmdSemLock, codec.CmdSemRelease
		d.acqArg = []byte(timeout + " " + strconv.Itoa(cfg.Limit) + ttl)
	case ModeRW:
		d.rw = newRWPick(cfg.ReadRatio, w)
		d.acqArg = []byte(timeout + ttl)
	case ModeTwoPhase:
		d.twoPhase = true
		if ttl != "" {
			d.enqArg = []byte(ttl[1:])
		}
		d.waitArg = []byte(timeout)
		d.acqArg = []byte(timeout + ttl)
	default:
		d.acqArg = []byte(timeout + ttl)
	}
	d.pipeline = cfg.Pipeline && !d.twoPhase
	return d
}

func (d *tcpDriver) auth(ctx context.Context, secret string) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = d.conn.SetDeadline(dl)
		defer d.conn.SetDeadline(time.Time{})
	}
	d.out = codec.AppendRequest(d.out[:0], codec.CmdAuth, []byte("_"), []byte(secret))
	if err := d.roundTrip(); err != nil {
		return err
	}
	if d.resp.Status != codec.StatusOK {
		return fmt.Errorf("auth refused: %s", d.resp.Status)
	}
	return nil
}

// roundTrip writes d.out and decodes one answer into d.resp. d.resp's
// slices alias the reader's buffer until the next read.
func (d *tcpDriver) roundTrip() error {
	if _, err := d.conn.Write(d.out); err != nil {
		return err
	}
	return d.readResp()
}

func (d *tcpDriver) op() error {
	d.rw.next(d)
	if d.pipeline {
		return d.pipelinedOp()
	}
	var err error
	if d.twoPhase {
		err = d.enqueueWait()
	} else {
		d.out = codec.AppendRequest(d.out[:0], d.acquire, d.key, d.acqArg)
		if err = d.roundTrip(); err == nil {
			err = d.granted(codec.StatusOK)
		}
	}
	if err != nil {
		return err
	}
	d.held = append(d.held[:0], d.resp.Token...) // the token aliases the reader's buffer
	d.heldRel = d.release
	return d.flush()
}

// refusal is the refused op of the answer in d.resp.
func (d *tcpDriver) refusal() error {
	answer := d.resp.Status.String()
	if len(d.resp.Body) > 0 {
		answer += " " + string(d.resp.Body)
	}
	return refused(answer)
}

// pipelinedOp writes the release of the last op's grant and this op's
// acquire at once, then reads both answers. The grant stays held until
// the next op (or flush).
func (d *tcpDriver) pipelinedOp() error {
	d.out = d.out[:0]
	releasing := len(d.held) > 0
	if releasing {
		d.out = codec.AppendRequest(d.out, d.heldRel, d.key, d.held)
		d.held = d.held[:0]
	}
	d.out = codec.AppendRequest(d.out, d.acquire, d.key, d.acqArg)
	if _, err := d.conn.Write(d.out); err != nil {
		return err
	}
	var relErr error
	if releasing {
		if err := d.readResp(); err != nil {
			return err
		}
		if d.resp.Status != codec.StatusOK {
			relErr = d.refusal() // the last op's lease ran out
		}
	}
	if err := d.readResp(); err != nil {
		return err
	}
	if err := d.granted(codec.StatusOK); err != nil {
		return err
	}
	d.held = append(d.held, d.resp.Token...)
	d.heldRel = d.release
	return relErr
}

// flush releases the grant held, if any: a pipelined worker's last one,
// untimed.
func (d *tcpDriver) flush() error {
	if len(d.held) == 0 {
		return nil
	}
	d.out = codec.AppendRequest(d.out[:0], d.heldRel, d.key, d.held)
	d.held = d.held[:0]
	if err := d.roundTrip(); err != nil {
		return err
	}
	if d.resp.Status != codec.StatusOK {
		return d.refusal()
	}
	return nil
}

// readResp decodes one answer into d.resp; its slices alias the reader's
// buffer until the next read.
func (d *tcpDriver) readResp() error {
	line, err := d.rd.ReadSlice('\n')
	if err != nil {
		return err
	}
	if _, err := codec.DecodeResponse(line, &d.resp); err != nil {
		return fmt.Errorf("%w: %q", err, line)
	}
	return nil
}

func (d *tcpDriver) enqueueWait() error {
	d.out = codec.AppendRequest(d.out[:0], codec.CmdEnqueue, d.key, d.enqArg)
	if err := d.roundTrip(); err != nil {
		return err
	}
	if d.resp.Status == codec.StatusAcquired {
		return d.granted(codec.StatusAcquired)
	}
	if d.resp.Status != codec.StatusQueued {
		return d.granted(codec.StatusQueued) // reports the refusal
	}
	d.out = codec.AppendRequest(d.out[:0], codec.CmdWait, d.key, d.waitArg)
	if err := d.roundTrip(); err != nil {
		return err
	}
	return d.granted(codec.StatusOK)
}

// granted checks that d.resp is a grant with status want.
func (d *tcpDriver) granted(want codec.Status) error {
	switch {
	case d.resp.Status == want && len(d.resp.Token) > 0:
		return nil
	case d.resp.Status == codec.StatusError && len(d.resp.Body) == 0:
		// "error" on an acquire means the server sees a protocol
		// violation; it closes the connection next.
		return fmt.Errorf("server answered error to %s", d.out[:len(d.out)-1])
	case d.resp.Status == codec.StatusInvalid || d.resp.Status == codec.StatusErrorAuth:
		return fmt.Errorf("server answered %q", d.resp.Body)
	}
	return d.refusal()
}

func (d *tcpDriver) interrupt() { _ = d.conn.SetDeadline(timePast) }

func (d *tcpDriver) close() error { return d.conn.Close() }
