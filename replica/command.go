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
	OpRWAcquire                  // engine.Acquire of a read-write key: Owner, Key, Limit (the engine.Mode), TTL, Timeout, Salt
	OpRWEnqueue                  // engine.Enqueue of a read-write key: Owner, Key, Limit (the engine.Mode), TTL, Salt
	OpAcquireSet                 // engine.AcquireSet: Owner, Key (the keys, space-separated), Limit, TTL, Timeout, Salt
	OpCancelSet                  // engine.CancelSet: Owner, Key (the set's first key)
	opEnd
)

var opNames = [...]string{"", "acquire", "enqueue", "wait", "release", "renew", "disconnect",
	"expire", "open_session", "close_session", "begin_session", "end_session", "restamp", "cancel_wait",
	"rw_acquire", "rw_enqueue", "acquire_set", "cancel_set"}

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
	// HTTPAddr is, in a Restamp, where the leader serves the REST API.
	HTTPAddr string
	// ReqKey is the client's request id (Acquire, Enqueue, Wait,
	// Release, Renew), empty for none: the FSM answers a second command
	// with the same ReqKey from its window of recent ones (dedup.go). It
	// comes after HTTPAddr in the encoding and is optional alike.
	ReqKey []byte
	// Client is the TCP connection that sent the command, for the
	// leader's batch wait (batchwait.go); not replicated. 0 (REST, the
	// node's own commands) takes no part in the wait.
	Client engine.OwnerID
	// LockDelay is an Acquire's or Enqueue's own lock-delay
	// (engine.AcquireReq.LockDelay); optional, after HTTPAddr.
	LockDelay time.Duration
}

const commandVersion = 1

// The encoded fields, in order: bit i of the presence mask is field i. A
// new field goes at the end and is optional, so that older entries decode
// unchanged.
const (
	fOrigin = iota
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
	fHTTPAddr
	fReqKey
	fLockDelay
	nFields
	fAll = 1<<nFields - 1
)

// A field's encoding: varints for numbers (zig-zag for signed ones),
// fixed 8 bytes for salts, a length prefix for bytes, nothing for a flag
// (its mask bit is its value).
type fieldKind uint8

const (
	uvarintField fieldKind = iota
	varintField
	fixed64Field
	bytesField
	flagField
)

var fieldKinds = [nFields]fieldKind{
	fOrigin: uvarintField, fReqID: uvarintField, fNow: varintField, fOwner: uvarintField, fKey: bytesField,
	fLimit: varintField, fTTL: varintField, fTimeout: varintField, fSalt: fixed64Field, fFence: uvarintField,
	fTokSalt: fixed64Field, fRelease: flagField, fAddr: bytesField, fHTTPAddr: bytesField,
	fReqKey: bytesField, fLockDelay: varintField,
}

// fieldValues is c's fields by number: a numeric or flag field in num (a
// signed one as its int64 bits), a bytes field in str. Zero is absent.
type fieldValues struct {
	num [nFields]uint64
	str [nFields][]byte
}

// get fills v with c's fields.
func (v *fieldValues) get(c *Command) {
	var release uint64
	if c.Release {
		release = 1
	}
	v.num = [nFields]uint64{fOrigin: c.Origin, fReqID: c.ReqID, fNow: uint64(c.Now), fOwner: uint64(c.Owner),
		fLimit: uint64(c.Limit), fTTL: uint64(c.TTL), fTimeout: uint64(c.Timeout), fSalt: c.Salt,
		fFence: c.Token.Fence, fTokSalt: c.Token.Salt, fRelease: release, fLockDelay: uint64(c.LockDelay)}
	v.str[fKey], v.str[fAddr], v.str[fHTTPAddr] = c.Key, []byte(c.Addr), []byte(c.HTTPAddr)
	v.str[fReqKey] = c.ReqKey
}

// set makes c the command op with v's fields.
func (v *fieldValues) set(c *Command, op Op) {
	num, str := &v.num, &v.str
	*c = Command{Op: op, Origin: num[fOrigin], ReqID: num[fReqID], Now: int64(num[fNow]),
		Owner: engine.OwnerID(num[fOwner]), Key: str[fKey], Limit: int(num[fLimit]), TTL: time.Duration(num[fTTL]),
		Timeout: time.Duration(num[fTimeout]), Salt: num[fSalt],
		Token: fence.Token{Fence: num[fFence], Salt: num[fTokSalt]}, Release: num[fRelease] != 0,
		Addr: string(str[fAddr]), HTTPAddr: string(str[fHTTPAddr]), ReqKey: str[fReqKey],
		LockDelay: time.Duration(num[fLockDelay])}
}

// AppendCommand appends c's encoding to b: a version byte, the op, a
// varint presence mask, then each non-zero field (fieldKinds).
func AppendCommand(b []byte, c *Command) []byte {
	var v fieldValues
	v.get(c)
	num, str := &v.num, &v.str
	var mask uint64
	for i := range nFields {
		if num[i] != 0 || len(str[i]) != 0 {
			mask |= 1 << i
		}
	}
	b = append(b, commandVersion, byte(c.Op))
	b = binary.AppendUvarint(b, mask)
	for i, kind := range fieldKinds {
		if mask&(1<<i) == 0 {
			continue
		}
		switch kind {
		case uvarintField:
			b = binary.AppendUvarint(b, num[i])
		case varintField:
			b = binary.AppendVarint(b, int64(num[i]))
		case fixed64Field:
			b = binary.BigEndian.AppendUint64(b, num[i])
		case bytesField:
			b = appendString(b, str[i])
		}
	}
	return b
}

// DecodeCommand decodes one AppendCommand encoding, all of b. c.Key
// aliases b. A field whose bit is set must be non-zero, as AppendCommand
// writes it: one command has one encoding (FuzzDecodeCommand).
func DecodeCommand(b []byte, c *Command) error {
	*c = Command{}
	if len(b) < 3 || b[0] != commandVersion {
		return ErrBadCommand
	}
	op := Op(b[1])
	if op == 0 || op >= opEnd {
		return ErrBadCommand
	}
	d := decoder{b: b[2:]}
	mask := d.uvarint()
	if mask&^fAll != 0 {
		return ErrBadCommand
	}
	var v fieldValues
	num, str := &v.num, &v.str
	for i, kind := range fieldKinds {
		if mask&(1<<i) == 0 {
			continue
		}
		switch kind {
		case uvarintField:
			num[i] = d.uvarint()
		case varintField:
			num[i] = uint64(d.varint())
		case fixed64Field:
			num[i] = d.fixed64()
		case flagField:
			num[i] = 1
		case bytesField:
			str[i] = d.bytes()
		}
		if num[i] == 0 && len(str[i]) == 0 {
			d.bad = true
		}
	}
	if d.bad || len(d.b) != 0 {
		return ErrBadCommand
	}
	v.set(c, op)
	return nil
}

type decoder struct {
	b   []byte
	bad bool
}

// varintLen is the length of x's shortest uvarint encoding: the only one
// the decoder accepts, so that one value has one encoding.
func varintLen(x uint64) int { return max(1, (bits.Len64(x)+6)/7) }

// fail marks d bad: what is left reads as nothing.
func (d *decoder) fail() { d.bad, d.b = true, nil }

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n != varintLen(v) {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// varint reads what binary.AppendVarint writes: a zig-zag uvarint.
func (d *decoder) varint() int64 {
	u := d.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) fixed64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}
