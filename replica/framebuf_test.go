package replica

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/internal/testutil"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestMessagesReadIntoOneBufferOwnTheirBytes: a reader decodes every
// frame that fits into the same buffer, so each message must hold no byte
// of it once the next frame is read (raft keeps a follower's entries in
// its log): entries, context and a small snapshot's state come through
// intact after later frames overwrote the buffer; a frame larger than the
// buffer comes through too.
func TestMessagesReadIntoOneBufferOwnTheirBytes(t *testing.T) {
	ent := func(i uint64, data string) *raftpb.Entry {
		return &raftpb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(1), Data: []byte(data)}
	}
	big := bytes.Repeat([]byte{'b'}, 2*frameBuf)
	want := []*raftpb.Message{
		{Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(2), Index: proto.Uint64(1),
			Entries: []*raftpb.Entry{ent(2, "first entry"), ent(3, "second entry")}, Context: []byte("ctx-1")},
		{Type: raftpb.MessageType_MsgSnap.Enum(), To: proto.Uint64(2),
			Snapshot: &raftpb.Snapshot{Data: []byte("a small state"), Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(7)}}},
		{Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(2), Entries: []*raftpb.Entry{ent(8, string(big))}},
		{Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(2), Index: proto.Uint64(8),
			Entries: []*raftpb.Entry{ent(9, "ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ")}, Context: []byte("overwrite")},
	}
	var stream bytes.Buffer
	for _, m := range want {
		if m.GetType() == raftpb.MessageType_MsgSnap {
			parts, err := snapMessageParts(m)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, p := range parts {
				n += len(p)
			}
			stream.Write(binary.LittleEndian.AppendUint32(nil, uint32(n)))
			for _, p := range parts {
				stream.Write(p)
			}
			continue
		}
		buf, ok := encodeFrame(m)
		if !ok {
			t.Fatal("encodeFrame failed")
		}
		binary.LittleEndian.PutUint32(buf, uint32(len(buf)-4))
		stream.Write(buf)
	}
	buf := make([]byte, frameBuf)
	var got []*raftpb.Message
	for range want {
		m, err := nextMessage(&stream, buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("message %d = %v after later frames were read; want %v", i, got[i], want[i])
		}
	}
}

// TestNowWriterAllocatesNothing: a write that the socket takes at once
// allocates nothing (the leader sends every MsgApp this way).
func TestNowWriterAllocatesNothing(t *testing.T) {
	a, b := tcpPair(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			if _, err := b.Read(buf); err != nil {
				return
			}
		}
	}()
	w, err := newNowWriter(a)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("a frame of a few bytes")
	if allocs := testing.AllocsPerRun(200, func() {
		if n, err := w.write(msg); n != len(msg) || err != nil {
			t.Fatalf("write = %d, %v", n, err)
		}
	}); allocs != 0 {
		t.Fatalf("nowWriter.write allocates %v times per write; want 0", allocs)
	}
	_ = a.Close()
	<-done
}

// TestSendAtOnceAllocatesNothing: a message the leader writes at once
// (the connection up, nothing queued) is encoded into the stream's own
// buffer and written without an allocation of the transport's.
func TestSendAtOnceAllocatesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	frames := make(chan int, 1<<16)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		buf := make([]byte, frameBuf)
		for {
			b, err := readFrameInto(r, maxFrame, buf)
			if err != nil {
				return
			}
			frames <- len(b)
		}
	}()
	tr := newTransport(dialOnlyStorage(t), zap.NewNop())
	tr.unreachable = func(uint64) {}
	tr.setPeer(2, ln.Addr().String())
	defer tr.close()
	m := &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
		Index: proto.Uint64(5), Commit: proto.Uint64(4), Entries: []*raftpb.Entry{{Index: proto.Uint64(6), Data: []byte("an entry")}}}
	tr.send(m)
	testutil.Eventually(t, 10*time.Second, func() bool { // the hello and m: the connection is up
		return len(frames) >= 2
	}, "the first message never arrived")
	if allocs := testing.AllocsPerRun(100, func() { tr.send(m) }); allocs != 0 {
		t.Fatalf("send allocates %v times per message; want 0", allocs)
	}
}
