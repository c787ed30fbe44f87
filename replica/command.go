package replica

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/fence"
)

// Op names an engine operation carried by a log entry.
type Op uint8

// Ops. Each is one mutating engine call; Restamp is the new leader's
// first entry (see FSM).
const (
	OpAcquire      Op = iota + 1 // engine.Acquire: Owner, Key, Limit, TTL, Timeout, Salt
	OpEnqueue                    // engine.Enqueue: Owner, Key, Limit, TTL, Salt
	OpWait                       // engine.Wait: Owner, Key, Timeout
	OpRelease                    // engine.Release: Key, Token
	OpRenew                      // engine.RenewAs: Key, Token, TTL, Owner
	OpDisconnect                 // engine.Disconnect: Owner, Release
	OpExpire                     // engine.Expire
	OpOpenSession                // engine.OpenSessionKeyed: Owner, TTL, Salt (the session key)
	OpCloseSession               // engine.CloseSession: Owner
	OpBeginSession               // engine.BeginSession: Owner
	OpEndSession                 // engine.EndSession: Owner
	OpRestamp                    // a new leader's clock: Key = its node ID, Addr = its client address, HTTPAddr = its REST address
	OpCancelWait                 // engine.CancelWait: Owner, Key
	opEnd
)

var opNames = [...]string{"", "acquire", "enqueue", "wait", "release", "renew", "disconnect",
	"expire", "open_session", "close_session", "begin_session", "end_session", "restamp", "cancel_wait"}

// String names the op.
func (o Op) String() string {
	if o > 0 && o < opEnd {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", o)
}

// Command is one log entry: an engine call with every input it needs. The
// proposing Node fills in Now, Salt (for Acquire and Enqueue), Origin and
// ReqID; the caller fills in the rest.
type Command struct {
	Op      Op
	Now     int64  // the leader's clock, Unix ns
	Origin  uint64 // the proposing Node's incarnation; its Sinks live there
	ReqID   uint64 // the request, unique per Origin
	Owner   engine.OwnerID
	Key     []byte // aliases the entry's data after DecodeCommand
	Limit   int
	TTL     time.Duration
	Timeout time.Duration
	Salt    uint64      // the grant's token salt, from the leader's CSPRNG
	Token   fence.Token // Release, Renew; in a Restamp, Token.Fence is the fence floor (see FSM)
	Release bool        // Disconnect: release held leases too
	Addr    string      // Restamp: the leader's client address
	// HTTPAddr is, in a Restamp, where the leader serves the REST API
	// (empty when it does not). It is the last field of the encoding and
	// optional: entries written before it existed decode unchanged.
	HTTPAddr string
	// Client is who sent the command to this node (the TCP connection),
	// for the proposing leader's batch wait (batchwait.go): whom it
	// answered, and who is back. Not replicated; 0 (the REST API, the
	// node's own commands) takes no part in the wait. It is not Owner,
	// which a release leaves 0.
	Client engine.OwnerID
}

const commandVersion = 1

// field bits of the presence mask: a zero field is not written.
const (
	fOrigin = 1 << iota
	fReqID
	fNow
	fOwner
	fKey
	fLimit
	fTTL
	fTimeout
	fSalt
	fFence
	fTokSalt
	fRelease
	fAddr
	fHTTPAddr // added after version 1 shipped: optional, always last
	fAll      = 1<<iota - 1
)

// AppendCommand appends c's encoding to b: a version byte, the op, a
// varint presence mask, then each non-zero field as a varint (durations
// and times zig-zag, salts fixed 8 bytes, bytes length-prefixed).
func AppendCommand(b []byte, c *Command) []byte {
	var mask uint64
	set := func(bit uint64, on bool) {
		if on {
			mask |= bit
		}
	}
	set(fOrigin, c.Origin != 0)
	set(fReqID, c.ReqID != 0)
	set(fNow, c.Now != 0)
	set(fOwner, c.Owner != 0)
	set(fKey, len(c.Key) != 0)
	set(fLimit, c.Limit != 0)
	set(fTTL, c.TTL != 0)
	set(fTimeout, c.Timeout != 0)
	set(fSalt, c.Salt != 0)
	set(fFence, c.Token.Fence != 0)
	set(fTokSalt, c.Token.Salt != 0)
	set(fRelease, c.Release)
	set(fAddr, c.Addr != "")
	set(fHTTPAddr, c.HTTPAddr != "")
	b = append(b, commandVersion, byte(c.Op))
	b = binary.AppendUvarint(b, mask)
	if mask&fOrigin != 0 {
		b = binary.AppendUvarint(b, c.Origin)
	}
	if mask&fReqID != 0 {
		b = binary.AppendUvarint(b, c.ReqID)
	}
	if mask&fNow != 0 {
		b = binary.AppendVarint(b, c.Now)
	}
	if mask&fOwner != 0 {
		b = binary.AppendUvarint(b, uint64(c.Owner))
	}
	if mask&fKey != 0 {
		b = binary.AppendUvarint(b, uint64(len(c.Key)))
		b = append(b, c.Key...)
	}
	if mask&fLimit != 0 {
		b = binary.AppendVarint(b, int64(c.Limit))
	}
	if mask&fTTL != 0 {
		b = binary.AppendVarint(b, int64(c.TTL))
	}
	if mask&fTimeout != 0 {
		b = binary.AppendVarint(b, int64(c.Timeout))
	}
	if mask&fSalt != 0 {
		b = binary.BigEndian.AppendUint64(b, c.Salt)
	}
	if mask&fFence != 0 {
		b = binary.AppendUvarint(b, c.Token.Fence)
	}
	if mask&fTokSalt != 0 {
		b = binary.BigEndian.AppendUint64(b, c.Token.Salt)
	}
	if mask&fAddr != 0 {
		b = binary.AppendUvarint(b, uint64(len(c.Addr)))
		b = append(b, c.Addr...)
	}
	if mask&fHTTPAddr != 0 {
		b = binary.AppendUvarint(b, uint64(len(c.HTTPAddr)))
		b = append(b, c.HTTPAddr...)
	}
	return b
}

// DecodeCommand decodes one AppendCommand encoding, all of b. c.Key
// aliases b.
func DecodeCommand(b []byte, c *Command) error {
	*c = Command{}
	if len(b) < 3 || b[0] != commandVersion {
		return ErrBadCommand
	}
	c.Op = Op(b[1])
	if c.Op == 0 || c.Op >= opEnd {
		return ErrBadCommand
	}
	d := decoder{b: b[2:]}
	mask := d.uvarint()
	if mask&^fAll != 0 {
		return ErrBadCommand
	}
	if mask&fOrigin != 0 {
		c.Origin = d.uvarint()
	}
	if mask&fReqID != 0 {
		c.ReqID = d.uvarint()
	}
	if mask&fNow != 0 {
		c.Now = d.varint()
	}
	if mask&fOwner != 0 {
		c.Owner = engine.OwnerID(d.uvarint())
	}
	if mask&fKey != 0 {
		c.Key = d.bytes()
	}
	if mask&fLimit != 0 {
		c.Limit = int(d.varint())
	}
	if mask&fTTL != 0 {
		c.TTL = time.Duration(d.varint())
	}
	if mask&fTimeout != 0 {
		c.Timeout = time.Duration(d.varint())
	}
	if mask&fSalt != 0 {
		c.Salt = d.fixed64()
	}
	if mask&fFence != 0 {
		c.Token.Fence = d.uvarint()
	}
	if mask&fTokSalt != 0 {
		c.Token.Salt = d.fixed64()
	}
	c.Release = mask&fRelease != 0
	if mask&fAddr != 0 {
		c.Addr = string(d.bytes())
	}
	if mask&fHTTPAddr != 0 {
		c.HTTPAddr = string(d.bytes())
	}
	if d.bad || len(d.b) != 0 || !canonical(mask, c) {
		*c = Command{}
		return ErrBadCommand
	}
	return nil
}

// canonical reports whether every field whose bit is set is non-zero, as
// AppendCommand writes them: so decoding then encoding is the identity
// (FuzzDecodeCommand), and one command has one encoding.
func canonical(mask uint64, c *Command) bool {
	zero := [...]struct {
		bit  uint64
		zero bool
	}{
		{fOrigin, c.Origin == 0}, {fReqID, c.ReqID == 0}, {fNow, c.Now == 0}, {fOwner, c.Owner == 0},
		{fKey, len(c.Key) == 0}, {fLimit, c.Limit == 0}, {fTTL, c.TTL == 0}, {fTimeout, c.Timeout == 0},
		{fSalt, c.Salt == 0}, {fFence, c.Token.Fence == 0}, {fTokSalt, c.Token.Salt == 0},
		{fAddr, c.Addr == ""}, {fHTTPAddr, c.HTTPAddr == ""},
	}
	for _, z := range zero {
		if mask&z.bit != 0 && z.zero {
			return false
		}
	}
	return true
}

type decoder struct {
	b   []byte
	bad bool
}

// varintLen is the length of x's shortest uvarint encoding: the only one
// the decoder accepts, so that one value has one encoding.
func varintLen(x uint64) int { return max(1, (bits.Len64(x)+6)/7) }

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n != varintLen(v) {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 || n != varintLen(uint64(v)<<1^uint64(v>>63)) {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) fixed64() uint64 {
	if len(d.b) < 8 {
		d.bad = true
		d.b = nil
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.bad = true
		d.b = nil
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}
