package replica

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"
)

// Transport versions (major.minor). A stream opens with the dialer's
// hello: its raft ID, its address and, optionally, its version as two
// uvarints; without one it is 1.0, which this release sends too (the
// previous release's acceptor refuses anything more). The acceptor
// answers every hello with its own version (transportReply: "LTCHTP",
// major, minor); the previous release answers nothing. A higher major
// version, either way, closes the stream with a log line. Minor versions
// only add to the handshake: any two talk.
const (
	transportMajor      = 1
	transportMinor      = 1 // 1: the acceptor answers with its version
	transportReplyMagic = "LTCHTP"
)

// parseHello decodes a hello: the dialer's raft ID, address and version.
func parseHello(b []byte) (from uint64, addr string, major, minor uint64, ok bool) {
	d := decoder{b: b}
	from, addr = d.uvarint(), string(d.bytes())
	major, minor = 1, 0
	if !d.bad && len(d.b) > 0 {
		major, minor = d.uvarint(), d.uvarint()
	}
	return from, addr, major, minor, !d.bad && len(d.b) == 0
}

// transportReply is the acceptor's answer to a hello, a frame.
func transportReply() []byte {
	b := binary.LittleEndian.AppendUint32(nil, 0)
	b = append(b, transportReplyMagic...)
	b = binary.AppendUvarint(binary.AppendUvarint(b, transportMajor), transportMinor)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// answerHello sends c's dialer this node's version and reports whether
// the dialer's (major, minor) is one this node talks to; if not, it logs
// why the stream is refused.
func (t *transport) answerHello(c net.Conn, from uint64, addr string, major, minor uint64) bool {
	_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, _ = c.Write(transportReply())
	_ = c.SetWriteDeadline(time.Time{})
	if major <= transportMajor {
		return true
	}
	t.refuseVersion(from, addr, major, minor)
	return false
}

// watchReply reads the acceptor's answer on c, a stream this node
// dialed to p, and closes c if the acceptor speaks a newer major version.
// An acceptor of the previous release answers nothing: the read ends
// when c closes.
func (t *transport) watchReply(p *peerStream, c net.Conn) {
	b, err := readFrame(c, maxHello)
	if err != nil {
		return
	}
	d := decoder{b: b}
	if len(b) < len(transportReplyMagic) || string(b[:len(transportReplyMagic)]) != transportReplyMagic {
		return
	}
	d.b = b[len(transportReplyMagic):]
	major, minor := d.uvarint(), d.uvarint()
	if d.bad || major <= transportMajor {
		return
	}
	t.refuseVersion(p.id, p.addr, major, minor)
	_ = c.Close() // the writer finds it closed and dials again, after a pause
}

// refuseVersion logs a stream refused for its peer's newer major version, once
// per peer and version.
func (t *transport) refuseVersion(id uint64, addr string, major, minor uint64) {
	key := fmt.Sprint(id, "/", major)
	t.mu.Lock()
	seen := t.versionWarned[key]
	if t.versionWarned == nil {
		t.versionWarned = make(map[string]bool)
	}
	t.versionWarned[key] = true
	t.mu.Unlock()
	if seen {
		return
	}
	t.log.Error("raft transport: a peer speaks a newer transport version than this release; its streams are refused. "+
		"Upgrade this node (docs/upgrades.md)",
		zap.Uint64("peer_raft_id", id), zap.String("peer_addr", addr),
		zap.String("peer_version", fmt.Sprintf("%d.%d", major, minor)),
		zap.String("version", fmt.Sprintf("%d.%d", transportMajor, transportMinor)))
}
