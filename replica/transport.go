package replica

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The raft transport: one outgoing TCP stream per peer, over the
// listener of Storage (with an auth token every connection passes the
// handshake of auth.go before a message crosses it), carrying frames
// (frame.go). Messages to a peer whose queue is full, or whose connection failed, are
// dropped and the peer is reported unreachable: raft retransmits.
const (
	peerQueue    = 4096
	maxFrame     = 256 << 20
	maxHello     = 1024
	redialPause  = 50 * time.Millisecond
	writeTimeout = 5 * time.Second
)

type peerStream struct {
	id   uint64
	addr string
	stop chan struct{}
	q    queue[frame] // frames waiting for the writer

	wmu sync.Mutex // the connection; held by whoever writes to it
	c   net.Conn
	w   *bufio.Writer
	now *nowWriter // c's writes that never wait (sendNow)
	enc []byte     // sendNow's frame, reused
	// rest is the tail of a frame that send began on c and the socket
	// did not take at once; the writer sends it before anything else.
	rest []byte
	// live is c, for close and removePeer to cut a write stuck on a
	// peer that stopped reading without waiting for wmu.
	live atomic.Pointer[net.Conn]
}

// frame is a message queued for a peer's writer: its encoding, or a
// snapshot, which the writer encodes (the copy of a large state is not
// made on raft's goroutine, which sends it).
type frame struct {
	b    []byte
	snap *raftpb.Message
}

type transport struct {
	self        uint64 // this node's raft ID and address, sent in each stream's hello
	selfAddr    string
	st          *Storage
	log         *zap.Logger
	recv        func(*raftpb.Message) // delivers an incoming message to the node
	unreachable func(id uint64)
	snapDone    func(id uint64, ok bool)
	// cut, when set, drops the messages to and from the peers it names:
	// a network partition, for tests.
	cut atomic.Pointer[func(peer uint64) bool]

	handshakeWait time.Duration // the acceptor's bound on one auth handshake
	handshakes    chan struct{} // one slot per auth handshake in progress
	refused       atomic.Uint64 // connections refused by the handshake, for tests

	mu            sync.Mutex
	peers         map[uint64]*peerStream
	conns         map[net.Conn]struct{}
	warned        map[string]struct{} // hosts whose refusal has been logged
	versionWarned map[string]bool     // peers refused for a newer version, logged (transportver.go)
	closed        bool
	quit          chan struct{} // closed by close
	wg            sync.WaitGroup
}

func newTransport(st *Storage, log *zap.Logger) *transport {
	return &transport{st: st, log: log, peers: make(map[uint64]*peerStream), conns: make(map[net.Conn]struct{}),
		handshakeWait: authTimeout, handshakes: make(chan struct{}, authMaxPending),
		warned: make(map[string]struct{}), quit: make(chan struct{})}
}

// start begins accepting connections.
func (t *transport) start() {
	t.wg.Go(t.acceptLoop)
}

func (t *transport) acceptLoop() {
	for {
		c, err := t.st.ln.Accept()
		if err != nil {
			return // closed: the listener's Guard retries every other error
		}
		if t.st.key != nil {
			select {
			case t.handshakes <- struct{}{}: // freed by authenticate
			case <-t.quit:
				_ = c.Close()
				return
			}
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			_ = c.Close()
			return
		}
		t.conns[c] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.readLoop(c)
	}
}

func (t *transport) readLoop(c net.Conn) {
	defer t.wg.Done()
	defer func() {
		_ = c.Close()
		t.mu.Lock()
		delete(t.conns, c)
		t.mu.Unlock()
	}()
	if t.st.key != nil && !t.authenticate(c) {
		return
	}
	r := bufio.NewReaderSize(c, 64<<10)
	// The hello: the dialer's raft ID and address, so that a node that
	// does not know its peers yet (one just added, empty) can answer, and
	// its version (transportver.go).
	hello, err := readFrame(r, maxHello)
	if err != nil {
		return
	}
	from, addr, major, minor, ok := parseHello(hello)
	if !ok || !t.answerHello(c, from, addr, major, minor) {
		return
	}
	t.mu.Lock()
	known := t.peers[from] != nil
	t.mu.Unlock()
	if !known && from != t.self && addr != "" {
		t.setPeer(from, addr)
	}
	buf := make([]byte, frameBuf)
	for {
		m, err := nextMessage(r, buf)
		if err != nil {
			if !errors.Is(err, errFrameRead) {
				t.log.Warn("raft transport: bad message", zap.Error(err))
			}
			return
		}
		if f := t.cut.Load(); f != nil && (*f)(m.GetFrom()) {
			continue
		}
		t.recv(m)
	}
}

// frameBuf is the size of a reader's buffer for frames: a frame that
// fits is read into it, and the next frame reuses it; a larger one has
// its own.
const frameBuf = 64 << 10

// readFrame reads one frame and returns its message's bytes, at most
// limit of them.
func readFrame(r io.Reader, limit uint32) ([]byte, error) { return readFrameInto(r, limit, nil) }

// readFrameInto is readFrame, into buf when the frame fits.
func readFrameInto(r io.Reader, limit uint32, buf []byte) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n > limit {
		return nil, fmt.Errorf("replica: transport: a frame of %d bytes", n)
	}
	var b []byte
	if int(n) <= len(buf) {
		b = buf[:n]
	} else {
		b = make([]byte, n)
	}
	_, err := io.ReadFull(r, b)
	return b, err
}

// errFrameRead marks a failed read of a frame (a closed or broken stream).
var errFrameRead = errors.New("replica: transport: reading a frame")

// nextMessage reads and decodes the next frame, into buf when it fits
// (the message owns its bytes either way: unshare).
func nextMessage(r io.Reader, buf []byte) (*raftpb.Message, error) {
	b, err := readFrameInto(r, maxFrame, buf)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errFrameRead, err)
	}
	m, err := decodeMessage(b)
	if err != nil {
		return nil, err
	}
	if len(b) <= len(buf) {
		unshare(m)
	}
	return m, nil
}

// unshare copies out of a reader's buffer what m, decoded from it, still
// holds there: a snapshot's state (decodeMessage leaves it in the frame;
// every other field is copied as it is decoded).
func unshare(m *raftpb.Message) {
	if sn := m.GetSnapshot(); sn != nil && len(sn.GetData()) > 0 {
		sn.Data = bytes.Clone(sn.GetData())
	}
}

// setPeer makes id reachable at addr (a new stream if the address changed).
func (t *transport) setPeer(id uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if p := t.peers[id]; p != nil {
		if p.addr == addr {
			return
		}
		p.cut()
	}
	p := &peerStream{id: id, addr: addr, stop: make(chan struct{})}
	p.q.init()
	t.peers[id] = p
	t.wg.Go(func() { t.writeLoop(p) })
}

// removePeer stops the stream to id.
func (t *transport) removePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[id]; p != nil {
		p.cut()
		delete(t.peers, id)
	}
}

// send sends m to its peer. When the connection is up and nothing is
// queued or half-sent, the caller writes the frame itself, without
// waiting: a message on the commit path does not wait for the writer
// goroutine to be scheduled, and a peer that stopped reading (a follower
// stuck in a slow fsync) never stalls the caller, raft's goroutines
// among them. What the socket does not take at once is left to the
// writer. Otherwise the frame is queued for the writer; a full queue
// drops it (raft sends again) and reports the peer unreachable.
func (t *transport) send(m *raftpb.Message) {
	if f := t.cut.Load(); f != nil && (*f)(m.GetTo()) {
		return
	}
	t.mu.Lock()
	p := t.peers[m.GetTo()]
	t.mu.Unlock()
	if p == nil {
		return
	}
	snap := m.GetType() == raftpb.MessageType_MsgSnap
	f := frame{snap: m}
	if !snap {
		if t.sendNow(p, m) {
			return
		}
		buf, ok := encodeFrame(m)
		if !ok {
			return
		}
		f = frame{b: buf[4:]}
	}
	if !p.q.pushBelow(peerQueue, f) {
		t.unreachable(p.id)
		if snap {
			t.snapDone(p.id, false)
		}
	}
}

// sendNow writes m to p's connection when the connection is up and
// nothing is queued or half-sent, and says whether it did (or dropped m,
// which does not encode); what the socket does not take at once is left
// to the writer. m is encoded into the stream's own buffer, kept for the
// next message.
func (t *transport) sendNow(p *peerStream, m *raftpb.Message) bool {
	if !p.wmu.TryLock() {
		return false
	}
	if p.q.len() > 0 || p.c == nil || len(p.rest) > 0 {
		p.wmu.Unlock()
		return false
	}
	buf, ok := appendFrame(p.enc[:0], m)
	if !ok {
		p.wmu.Unlock()
		return true
	}
	if cap(buf) <= frameBuf {
		p.enc = buf // a burst's larger buffer is not kept
	}
	n, err := p.now.write(buf)
	if err != nil {
		t.dropConn(p)
	} else if n < len(buf) {
		p.rest = bytes.Clone(buf[n:])
	}
	p.wmu.Unlock()
	if err != nil {
		t.unreachable(p.id)
	} else if n < len(buf) {
		p.q.signal()
	}
	return true
}

// snapsFailed reports the snapshots among q, which will not be sent, as
// failed.
func (t *transport) snapsFailed(p *peerStream, q []frame) {
	for _, f := range q {
		if f.snap != nil {
			t.snapDone(p.id, false)
		}
	}
}

// writeFrame writes one frame, the message in parts, to p's connection,
// within writeTimeout (p.wmu held).
func (t *transport) writeFrame(p *peerStream, parts ...[]byte) error {
	n := 0
	for _, b := range parts {
		n += len(b)
	}
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], uint32(n))
	_ = p.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := p.w.Write(hdr[:]); err != nil {
		return err
	}
	for _, b := range parts {
		if _, err := p.w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// nowWriter writes to a connection what its socket takes without
// waiting. It keeps the connection's descriptor handle and its write
// callback, so that a write allocates nothing. Used under the stream's
// wmu.
type nowWriter struct {
	rc  syscall.RawConn // nil: no descriptor to try, the writer sends it all
	fn  func(fd uintptr) bool
	b   []byte
	n   int
	err error
}

func newNowWriter(c net.Conn) (*nowWriter, error) {
	w := &nowWriter{}
	w.fn = w.writeFd
	if sc, ok := c.(syscall.Conn); ok {
		rc, err := sc.SyscallConn()
		if err != nil {
			return nil, err
		}
		w.rc = rc
	}
	return w, nil
}

// write writes what of b the socket takes without waiting and says how
// much that was; a full socket is not an error.
func (w *nowWriter) write(b []byte) (int, error) {
	if w.rc == nil {
		return 0, nil
	}
	w.b, w.n, w.err = b, 0, nil
	err := w.rc.Write(w.fn)
	n := w.n
	if err == nil {
		err = w.err
	}
	w.b, w.err = nil, nil
	return n, err
}

func (w *nowWriter) writeFd(fd uintptr) bool {
	for w.n < len(w.b) {
		m, err := unix.Write(int(fd), w.b[w.n:])
		if m > 0 {
			w.n += m
		}
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
		case err != nil:
			w.err = err
		case m > 0:
			continue
		}
		break
	}
	return true // never wait for the socket to drain
}

// dropConn closes p's connection (p.wmu held); the writer dials again. A
// half-sent frame goes with it: raft sends again.
func (t *transport) dropConn(p *peerStream) {
	if p.c != nil {
		_ = p.c.Close()
	}
	p.c, p.w, p.now, p.rest = nil, nil, nil, nil
	p.live.Store(nil)
}

// cut stops p's writer and closes its connection now, even in the middle
// of a write (t.mu held).
func (p *peerStream) cut() {
	close(p.stop)
	if c := p.live.Load(); c != nil {
		_ = (*c).Close()
	}
}

// dial connects p and sends the hello (p.wmu held).
func (t *transport) dial(p *peerStream) error {
	c, err := dialPeer(p.addr, t.st.key)
	if err != nil {
		return err
	}
	now, err := newNowWriter(c)
	if err != nil {
		_ = c.Close()
		return err
	}
	p.c, p.w, p.now = c, bufio.NewWriterSize(c, 64<<10), now
	p.live.Store(&c)
	hello := appendString(binary.AppendUvarint(nil, t.self), t.selfAddr) // version 1.0: transportver.go
	if err := t.writeFrame(p, hello); err != nil {
		t.dropConn(p)
		return err
	}
	t.wg.Go(func() { t.watchReply(p, c) })
	return nil
}

// writeLoop sends what send queued, dialing when needed.
func (t *transport) writeLoop(p *peerStream) {
	defer func() {
		p.wmu.Lock()
		t.dropConn(p)
		p.wmu.Unlock()
		// Cut (the peer removed, or at a new address): a snapshot still
		// queued is reported failed, or raft would wait for it, the
		// follower paused, until it hears otherwise.
		t.snapsFailed(p, p.q.take())
	}()
	for {
		select {
		case <-p.stop:
			return
		case <-p.q.wake:
		}
		if !t.drain(p) {
			return
		}
	}
}

// drain sends what is queued for p until the queue is empty, dialing
// when needed; it reports false when p was cut meanwhile.
func (t *transport) drain(p *peerStream) bool {
	p.wmu.Lock()
	for {
		q := p.q.take()
		if len(q) == 0 && len(p.rest) == 0 {
			break
		}
		if p.c == nil {
			select {
			case <-p.stop: // cut: what is queued goes nowhere
				p.wmu.Unlock()
				t.snapsFailed(p, q)
				return false
			default:
			}
			if err := t.dial(p); err != nil {
				t.unreachable(p.id)
				t.snapsFailed(p, q)
				p.wmu.Unlock()
				select {
				case <-p.stop:
					return false
				case <-time.After(redialPause):
				}
				p.wmu.Lock()
				continue
			}
		}
		if err := t.writeQueued(p, q); err != nil {
			t.dropConn(p)
			t.unreachable(p.id)
		}
	}
	p.wmu.Unlock()
	return true
}

// writeQueued writes the tail of a half-sent frame, then q, to p's
// connection and flushes it; each snapshot in q is reported sent or
// failed (p.wmu held).
func (t *transport) writeQueued(p *peerStream, q []frame) error {
	var err error
	if len(p.rest) > 0 {
		_ = p.c.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err = p.w.Write(p.rest)
		p.rest = nil
	}
	for _, f := range q {
		if f.snap == nil {
			if err == nil {
				err = t.writeFrame(p, f.b)
			}
			continue
		}
		sent := false
		if err == nil {
			if parts, perr := snapMessageParts(f.snap); perr == nil {
				err = t.writeFrame(p, parts...)
				if err == nil {
					err = p.w.Flush()
				}
				sent = err == nil
			}
		}
		t.snapDone(p.id, sent)
	}
	if err == nil {
		err = p.w.Flush()
	}
	return err
}

// close stops every stream and connection and waits for the goroutines.
func (t *transport) close() {
	t.mu.Lock()
	t.closed = true
	close(t.quit)
	for id, p := range t.peers {
		p.cut()
		delete(t.peers, id)
	}
	for c := range t.conns {
		_ = c.Close()
	}
	t.mu.Unlock()
	_ = t.st.ln.Close()
	t.wg.Wait()
}
