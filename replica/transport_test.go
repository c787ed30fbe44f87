package replica

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// A peer that stops reading (a follower stuck in a slow fsync) must not
// stall the sender: raft's goroutines call send. Before, once the socket
// was full, a send waited out a 50 ms deadline and dropped the
// connection; now it returns at once and the rest waits for the writer.
func TestSendNeverWaitsForAStalledPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int32
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			mu.Lock()
			held = append(held, c) // accepted, never read
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			_ = c.Close()
		}
		mu.Unlock()
	}()

	st := dialOnlyStorage(t)
	tr := newTransport(st, zap.NewNop())
	var unreachable atomic.Int32
	tr.unreachable = func(uint64) { unreachable.Add(1) }
	tr.snapDone = func(uint64, bool) {}
	tr.setPeer(2, ln.Addr().String())
	defer tr.close()

	data := make([]byte, 64<<10)
	msg := func() *raftpb.Message {
		return &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
			Entries: []*raftpb.Entry{{Data: data}}}
	}
	// The first send dials; wait for the connection before the rest.
	tr.send(msg())
	deadline := time.Now().Add(5 * time.Second)
	for conns.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if conns.Load() == 0 {
		t.Fatal("the transport never connected")
	}
	// Far more than the socket buffers hold: the peer reads nothing.
	var slowest time.Duration
	for range 1500 {
		start := time.Now()
		tr.send(msg())
		slowest = max(slowest, time.Since(start))
	}
	t.Logf("slowest send %v, connections %d, unreachable reports %d", slowest, conns.Load(), unreachable.Load())
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections to a peer that only stopped reading; want 1 (a send gave up on it)", n)
	}
	tr.mu.Lock()
	p := tr.peers[2]
	tr.mu.Unlock()
	// The socket filled: the writer is stuck in a write (it holds wmu) or
	// something waits for it.
	if p.wmu.TryLock() {
		waiting := p.q.len() + len(p.rest)
		p.wmu.Unlock()
		if waiting == 0 {
			t.Fatal("nothing waits for the writer: the socket never filled, the test proves nothing")
		}
	}
}

// What send writes on its own and what the writer sends after it arrive as
// whole frames, in order, when the socket takes a frame only in part.
func TestSendSplitFrameArrivesWhole(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []uint64, 1)
	release := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		<-release // let the sender fill the socket first
		r := bufio.NewReader(c)
		var idx []uint64
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil { // the hello
			got <- nil
			return
		}
		if _, err := r.Discard(int(binary.LittleEndian.Uint32(hdr[:]))); err != nil {
			got <- nil
			return
		}
		for len(idx) == 0 || idx[len(idx)-1] != 299 {
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				break
			}
			b := make([]byte, binary.LittleEndian.Uint32(hdr[:]))
			if _, err := io.ReadFull(r, b); err != nil {
				break
			}
			m := &raftpb.Message{}
			if err := proto.Unmarshal(b, m); err != nil {
				break
			}
			idx = append(idx, m.GetIndex())
		}
		got <- idx
	}()

	st := dialOnlyStorage(t)
	tr := newTransport(st, zap.NewNop())
	tr.unreachable = func(uint64) {}
	tr.snapDone = func(uint64, bool) {}
	tr.setPeer(2, ln.Addr().String())
	defer tr.close()
	data := make([]byte, 48<<10)
	send := func(i uint64) {
		tr.send(&raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
			Index: proto.Uint64(i), Entries: []*raftpb.Entry{{Data: data}}})
	}
	send(0)
	for i := uint64(1); i < 300; i++ {
		send(i)
		if i == 150 {
			close(release)
		}
	}
	select {
	case idx := <-got:
		// Frames may be dropped (a full queue), never torn or reordered.
		if len(idx) == 0 {
			t.Fatal("no frame arrived")
		}
		for i := 1; i < len(idx); i++ {
			if idx[i] <= idx[i-1] {
				t.Fatalf("frames out of order: %v", idx)
			}
		}
		if idx[len(idx)-1] != 299 {
			t.Fatalf("last frame %d, want 299 (the writer must send what was queued)", idx[len(idx)-1])
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the frames never arrived whole")
	}
}

// A snapshot leaves raft's goroutine unencoded: send queues it, and the
// peer's writer encodes and sends it. Encoding it in send copied the
// whole state on raft's goroutine (65-75 ms for 20 MB), holding up its
// heartbeats and appends.
func TestSendLeavesASnapshotToTheWriter(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan *raftpb.Message, 4)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		var hdr [4]byte
		for i := 0; ; i++ {
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				return
			}
			b := make([]byte, binary.LittleEndian.Uint32(hdr[:]))
			if _, err := io.ReadFull(r, b); err != nil {
				return
			}
			if i == 0 {
				continue // the hello
			}
			m := &raftpb.Message{}
			if err := proto.Unmarshal(b, m); err != nil {
				return
			}
			got <- m
		}
	}()

	st := dialOnlyStorage(t)
	tr := newTransport(st, zap.NewNop())
	tr.unreachable = func(uint64) {}
	done := make(chan bool, 1)
	tr.snapDone = func(_ uint64, ok bool) { done <- ok }
	tr.setPeer(2, ln.Addr().String())
	defer tr.close()
	wait := func(what string) *raftpb.Message {
		select {
		case m := <-got:
			return m
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never arrived", what)
			return nil
		}
	}
	tr.send(&raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), To: proto.Uint64(2), From: proto.Uint64(1)})
	wait("the heartbeat") // the connection is up

	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	snap := &raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
		Snapshot: &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(42), Term: proto.Uint64(3)}}}
	tr.mu.Lock()
	p := tr.peers[2]
	tr.mu.Unlock()
	p.wmu.Lock() // the writer, woken, waits: what send allocates is send's own
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	tr.send(snap)
	runtime.ReadMemStats(&after)
	p.wmu.Unlock()
	if n := after.TotalAlloc - before.TotalAlloc; n > uint64(len(data)/2) { // whatever else runs meanwhile: far less
		t.Fatalf("send allocated %d bytes for an %d-byte snapshot; want it left to the writer", n, len(data))
	}
	m := wait("the snapshot")
	if m.GetType() != raftpb.MessageType_MsgSnap || m.GetSnapshot().GetMetadata().GetIndex() != 42 || !bytes.Equal(m.GetSnapshot().GetData(), data) {
		t.Fatalf("the peer got %v at %d with %d bytes; want the snapshot whole", m.GetType(), m.GetSnapshot().GetMetadata().GetIndex(), len(m.GetSnapshot().GetData()))
	}
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("the snapshot arrived, but its send was reported failed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the snapshot's send was never reported")
	}
}

// A snapshot queued for a peer that is then removed is reported failed:
// raft keeps a follower it sent a snapshot to paused until it hears how
// the send went. (The writer, told to stop while a frame waited, used to
// return without a word about it.)
func TestSnapshotQueuedForARemovedPeerFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	}()
	st := dialOnlyStorage(t)
	tr := newTransport(st, zap.NewNop())
	tr.unreachable = func(uint64) {}
	done := make(chan bool, 4)
	tr.snapDone = func(_ uint64, ok bool) { done <- ok }
	defer tr.close()
	for round := range 20 {
		tr.setPeer(2, ln.Addr().String())
		tr.mu.Lock()
		p := tr.peers[2]
		tr.mu.Unlock()
		p.wmu.Lock() // the writer cannot take the frame before the cut
		tr.send(&raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
			Snapshot: &raftpb.Snapshot{Data: []byte("state"), Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(7)}}})
		tr.removePeer(2)
		p.wmu.Unlock()
		select {
		case ok := <-done:
			if ok {
				t.Fatalf("round %d: a snapshot to a removed peer was reported sent", round)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the snapshot queued for a removed peer was never reported", round)
		}
	}
}

// dialOnlyStorage is a Storage with only what a transport needs: a
// listener, which close closes.
func dialOnlyStorage(t *testing.T) *Storage {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &Storage{ln: ln}
}
