package engine

import (
	"time"

	"github.com/latchd/latchd/fence"
)

// entry is one request on a resource: a waiter in its queue or, once
// granted, a holder of one of its slots. The same entry moves from the
// queue to the holders, so a grant allocates nothing.
type entry struct {
	res      *resource
	owner    OwnerID
	token    fence.Token // set when granted
	salt     uint64      // the token salt the request brought
	ttl      time.Duration
	deadline int64 // lease end (holding) or wait end (parked); see hidx
	hidx     int   // index in the shard's heap, -1 when it has no deadline
	holding  bool
	twoPhase bool          // enqueued with e/se and not yet collected by w/sw
	shared   bool          // a reader of a read-write key (see rwlock.go)
	sidx     int32         // scratch: its number in the state WriteState writes
	sink     Sink          // a parked request's Sink; nil otherwise
	set      *kset         // the waiting set it belongs to (AcquireSet); nil otherwise
	delay    time.Duration // AcquireReq.LockDelay: 0 the engine's, < 0 none
	qprev    *entry
	qnext    *entry // resource's holders or waiters list
	oprev    *entry
	onext    *entry // owner's list in this shard
}

// queue is an intrusive doubly linked list of entries through qprev/qnext.
type queue struct {
	head, tail *entry
	n          int
}

func (q *queue) pushBack(en *entry) {
	en.qprev, en.qnext = q.tail, nil
	if q.tail != nil {
		q.tail.qnext = en
	} else {
		q.head = en
	}
	q.tail = en
	q.n++
}

func (q *queue) remove(en *entry) {
	if en.qprev != nil {
		en.qprev.qnext = en.qnext
	} else {
		q.head = en.qnext
	}
	if en.qnext != nil {
		en.qnext.qprev = en.qprev
	} else {
		q.tail = en.qprev
	}
	en.qprev, en.qnext = nil, nil
	q.n--
}

// resource is one key: its slot limit, its holders and its FIFO queue.
// Invariant: waiters is empty whenever a slot is free (neither held nor
// reserved; for a read-write key, whose limit is rwLimit: whenever its head
// could be granted and no lock-delay holds it back).
type resource struct {
	key     string
	limit   int
	holders queue
	waiters queue
	idle    bool  // on the shard's idle list
	sidx    int32 // scratch: its number in the state WriteState writes
	idleAt  int64 // when it last became idle
	iprev   *resource
	inext   *resource
	touched bool // scratch mark for dropOwner
	// reserved counts the slots a lock-delay holds back (lockdelay.go):
	// they count against limit, like holders.
	reserved int
}

func (r *resource) empty() bool { return r.holders.n == 0 && r.waiters.n == 0 && r.reserved == 0 }

func (r *resource) findHolder(tok fence.Token) *entry {
	for en := r.holders.head; en != nil; en = en.qnext {
		if en.token == tok {
			return en
		}
	}
	return nil
}

// idleList holds a shard's idle resources, oldest first.
type idleList struct{ head, tail *resource }

func (l *idleList) pushBack(r *resource, now int64) {
	r.idle, r.idleAt = true, now
	r.iprev, r.inext = l.tail, nil
	if l.tail != nil {
		l.tail.inext = r
	} else {
		l.head = r
	}
	l.tail = r
}

func (l *idleList) remove(r *resource) {
	if r.iprev != nil {
		r.iprev.inext = r.inext
	} else {
		l.head = r.inext
	}
	if r.inext != nil {
		r.inext.iprev = r.iprev
	} else {
		l.tail = r.iprev
	}
	r.iprev, r.inext, r.idle = nil, nil, false
}
