//go:build etcdraft

package replica

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// The etcd-raft transport: one outgoing TCP stream per peer, over the
// listener and dialer of Storage (so with an auth token every connection
// has passed authStreamLayer's handshake before a message crosses it).
// A frame is a u32 little-endian length and a marshalled raftpb.Message.
// Messages to a peer whose queue is full, or whose connection failed, are
// dropped and the peer is reported unreachable: raft retransmits.
const (
	peerQueue    = 4096
	maxFrame     = 256 << 20
	redialPause  = 50 * time.Millisecond
	writeTimeout = 5 * time.Second
)

type peerStream struct {
	addr string
	q    chan []byte
	stop chan struct{}
}

type transport struct {
	self     uint64 // this node's raft ID and address, sent in each stream's hello
	selfAddr string
	st       *Storage
	log      *zap.Logger
	recv     func(*raftpb.Message)    // delivers an incoming message to the node
	report   func(id uint64, ok bool) // a peer is unreachable (ok false)
	snapDone func(id uint64, ok bool)
	// cut, when set, drops the messages to and from the peers it names:
	// a network partition, for tests.
	cut atomic.Pointer[func(peer uint64) bool]

	mu     sync.Mutex
	peers  map[uint64]*peerStream
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newTransport2(st *Storage, log *zap.Logger) *transport {
	return &transport{st: st, log: log, peers: make(map[uint64]*peerStream), conns: make(map[net.Conn]struct{})}
}

// start begins accepting connections.
func (t *transport) start() {
	t.wg.Add(1)
	go t.acceptLoop()
}

func (t *transport) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.st.ln.Accept()
		if err != nil {
			t.mu.Lock()
			closed := t.closed
			t.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(redialPause)
			continue
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
	r := bufio.NewReaderSize(c, 64<<10)
	var hdr [4]byte
	// The hello: the dialer's raft ID and address, so that a node that
	// does not know its peers yet (one just added, empty) can answer.
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return
	}
	hello := make([]byte, min(binary.LittleEndian.Uint32(hdr[:]), 1024))
	if _, err := io.ReadFull(r, hello); err != nil {
		return
	}
	d := decoder{b: hello}
	from, addr := d.uvarint(), string(d.bytes())
	if d.bad || len(d.b) != 0 {
		return
	}
	t.mu.Lock()
	known := t.peers[from] != nil
	t.mu.Unlock()
	if !known && from != t.self && addr != "" {
		t.setPeer(from, addr)
	}
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		if n > maxFrame {
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return
		}
		m := &raftpb.Message{}
		if err := proto.Unmarshal(b, m); err != nil {
			t.log.Warn("raft transport: bad message", zap.Error(err))
			return
		}
		if f := t.cut.Load(); f != nil && (*f)(m.GetFrom()) {
			continue
		}
		t.recv(m)
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
		close(p.stop)
	}
	p := &peerStream{addr: addr, q: make(chan []byte, peerQueue), stop: make(chan struct{})}
	t.peers[id] = p
	t.wg.Add(1)
	go t.writeLoop(id, p)
}

// removePeer stops the stream to id.
func (t *transport) removePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[id]; p != nil {
		close(p.stop)
		delete(t.peers, id)
	}
}

// send queues m for its peer; it never blocks.
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
	b, err := proto.Marshal(m)
	if err != nil {
		return
	}
	if m.GetType() == raftpb.MessageType_MsgSnap {
		b = append(b, 1) // marks a snapshot frame for the writer's report
	} else {
		b = append(b, 0)
	}
	select {
	case p.q <- b:
	default:
		t.report(m.GetTo(), false)
		if m.GetType() == raftpb.MessageType_MsgSnap {
			t.snapDone(m.GetTo(), false)
		}
	}
}

func (t *transport) writeLoop(id uint64, p *peerStream) {
	defer t.wg.Done()
	var c net.Conn
	var w *bufio.Writer
	defer func() {
		if c != nil {
			_ = c.Close()
		}
	}()
	var hdr [4]byte
	for {
		var b []byte
		select {
		case <-p.stop:
			return
		case b = <-p.q:
		}
		snap := b[len(b)-1] == 1
		b = b[:len(b)-1]
		if c == nil {
			var err error
			c, err = t.st.dial(p.addr, etcdDialTimout)
			if err != nil {
				c = nil
				t.report(id, false)
				if snap {
					t.snapDone(id, false)
				}
				select {
				case <-p.stop:
					return
				case <-time.After(redialPause):
				}
				continue
			}
			w = bufio.NewWriterSize(c, 64<<10)
			hello := appendString(binary.AppendUvarint(nil, t.self), t.selfAddr)
			binary.LittleEndian.PutUint32(hdr[:], uint32(len(hello)))
			_, _ = w.Write(hdr[:])
			_, _ = w.Write(hello)
		}
		binary.LittleEndian.PutUint32(hdr[:], uint32(len(b)))
		_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err := w.Write(hdr[:])
		if err == nil {
			_, err = w.Write(b)
		}
		if err == nil && len(p.q) == 0 {
			err = w.Flush()
		}
		if snap {
			if err == nil {
				err = w.Flush()
			}
			t.snapDone(id, err == nil)
		}
		if err != nil {
			_ = c.Close()
			c = nil
			t.report(id, false)
		}
	}
}

// close stops every stream and connection and waits for the goroutines.
func (t *transport) close() {
	t.mu.Lock()
	t.closed = true
	for id, p := range t.peers {
		close(p.stop)
		delete(t.peers, id)
	}
	for c := range t.conns {
		_ = c.Close()
	}
	t.mu.Unlock()
	_ = t.st.ln.Close()
	t.wg.Wait()
}
