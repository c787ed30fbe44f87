package replica

import (
	"encoding/binary"
	"errors"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A frame on the raft transport is a u32 little-endian length and a
// marshalled raftpb.Message. A snapshot's state is written from where it
// lies and read into the frame's own buffer, never copied
// (snapMessageParts, decodeMessage).

// encodeFrame encodes m after room for its length.
func encodeFrame(m *raftpb.Message) ([]byte, bool) {
	buf := make([]byte, 4, 4+proto.Size(m))
	buf, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf, m)
	return buf, err == nil
}

// appendFrame appends to b the frame of m, its length included.
func appendFrame(b []byte, m *raftpb.Message) ([]byte, bool) {
	at := len(b)
	b, err := proto.MarshalOptions{}.MarshalAppend(append(b, 0, 0, 0, 0), m)
	if err != nil {
		return b[:at], false
	}
	binary.LittleEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b, true
}

// decodeMessage decodes a frame. A snapshot's state is left where it is
// in b (the frame's own buffer, read for this message alone): decoding
// copies a byte field, and a snapshot of a large state is tens of
// megabytes, one long memmove no goroutine can be preempted in.
func decodeMessage(b []byte) (*raftpb.Message, error) {
	m := &raftpb.Message{}
	rest, data, ok := cutSnapData(b)
	if !ok {
		return m, proto.Unmarshal(b, m)
	}
	if err := proto.Unmarshal(rest, m); err != nil {
		return nil, err
	}
	if m.GetSnapshot() == nil {
		return nil, errors.New("replica: a snapshot's state without its snapshot")
	}
	m.Snapshot.Data = data
	return m, nil
}

// cutSnapData finds, in an encoded Message, the state of its snapshot
// (field 9, then field 1 in it) and returns the encoding without it, and
// the state (b's own bytes). ok is false when there is none to cut, or
// the encoding is not the one snapMessageParts and proto.Marshal write.
func cutSnapData(b []byte) (rest, data []byte, ok bool) {
	snapAt, snapEnd := -1, -1
	var snap []byte
	if !eachField(b, func(num protowire.Number, typ protowire.Type, at, end int, v []byte) bool {
		if num != 9 {
			return true
		}
		if snapAt >= 0 || typ != protowire.BytesType {
			return false
		}
		snapAt, snapEnd, snap = at, end, v
		return true
	}) || snapAt < 0 {
		return nil, nil, false
	}
	// Within the snapshot: the state (field 1) once, and the rest.
	var inner []byte
	if !eachField(snap, func(num protowire.Number, typ protowire.Type, at, end int, v []byte) bool {
		if num != 1 {
			inner = append(inner, snap[at:end]...)
			return true
		}
		if data != nil || typ != protowire.BytesType {
			return false
		}
		data = v[:len(v):len(v)] // the rest of the frame is not the state's to grow into
		return true
	}) || len(data) == 0 {
		return nil, nil, false
	}
	rest = make([]byte, 0, len(b)-len(snap)+len(inner)+16)
	rest = append(rest, b[:snapAt]...)
	rest = append(rest, b[snapEnd:]...)
	rest = protowire.AppendTag(rest, 9, protowire.BytesType)
	rest = protowire.AppendBytes(rest, inner)
	return rest, data, true
}

// eachField calls f with each field of the encoded message b: its number
// and wire type, where it starts and ends in b, and, for a bytes field,
// its value. It stops when f returns false, and reports whether it went
// through the whole of b and b was well formed.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, at, end int, v []byte) bool) bool {
	for i := 0; i < len(b); {
		num, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 {
			return false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[i+n:])
		if m < 0 {
			return false
		}
		var v []byte
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(b[i+n:])
			if v == nil {
				v = []byte{}
			}
		}
		if !f(num, typ, i, i+n+m, v) {
			return false
		}
		i += n + m
	}
	return true
}

// snapMessageParts is m, a MsgSnap, encoded in pieces that leave the
// snapshot's state where it is (snapshotParts): the message's other
// fields, then the snapshot's field. A decoder takes fields in any order.
func snapMessageParts(m *raftpb.Message) ([][]byte, error) {
	rest := &raftpb.Message{}
	src, dst := m.ProtoReflect(), rest.ProtoReflect()
	snapField := src.Descriptor().Fields().ByName("snapshot")
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd != snapField {
			dst.Set(fd, v)
		}
		return true
	})
	dst.SetUnknown(src.GetUnknown())
	head, err := proto.Marshal(rest)
	if err != nil {
		return nil, err
	}
	snap, err := snapshotParts(m.GetSnapshot())
	if err != nil {
		return nil, err
	}
	n := 0
	for _, b := range snap {
		n += len(b)
	}
	head = protowire.AppendTag(head, snapField.Number(), protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(n))
	return append([][]byte{head}, snap...), nil
}
