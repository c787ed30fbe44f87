package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// BoltStore is raft's stable store (term, vote) in one bbolt file; its
// log side is what raft dirs written before the WAL kept their entries in
// (DiskStorage moves them out) and a LogStore for tests. Every write is
// one bolt transaction, fsynced before it returns. The file is locked
// (flock) while open: a second process on the same raft dir fails to
// start instead of corrupting it. See WAL for why the log is not here.
type BoltStore struct {
	db *bolt.DB
}

var (
	bucketLogs   = []byte("logs")
	bucketStable = []byte("stable")

	// errKeyNotFound must read "not found": raft compares the message.
	errKeyNotFound = errors.New("not found")
)

var (
	_ raft.LogStore    = (*BoltStore)(nil)
	_ raft.StableStore = (*BoltStore)(nil)
)

// OpenBoltStore opens (or creates) the store at path. It gives up after
// lockWait if another process holds the file.
func OpenBoltStore(path string, lockWait time.Duration) (*BoltStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        lockWait,
		NoFreelistSync: true, // the freelist is rebuilt on open: fewer pages written per commit
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("replica: %s is locked by another process (is another latchd running on this raft dir?)", path)
		}
		return nil, fmt.Errorf("replica: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketLogs); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketStable)
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("replica: init %s: %w", path, err)
	}
	return &BoltStore{db: db}, nil
}

// Close closes the file and releases its lock.
func (s *BoltStore) Close() error { return s.db.Close() }

func indexKey(i uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], i) // big-endian: bolt's byte order is index order
	return k[:]
}

// FirstIndex implements raft.LogStore: 0 when the log is empty.
func (s *BoltStore) FirstIndex() (uint64, error) {
	var i uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketLogs).Cursor().First(); k != nil {
			i = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return i, err
}

// LastIndex implements raft.LogStore: 0 when the log is empty.
func (s *BoltStore) LastIndex() (uint64, error) {
	var i uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketLogs).Cursor().Last(); k != nil {
			i = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return i, err
}

// GetLog implements raft.LogStore.
func (s *BoltStore) GetLog(index uint64, l *raft.Log) error {
	return s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketLogs).Get(indexKey(index))
		if v == nil {
			return raft.ErrLogNotFound
		}
		return decodeLog(v, index, l) // copies: v is only valid in the transaction
	})
}

// StoreLog implements raft.LogStore.
func (s *BoltStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore: one transaction, one fsync.
func (s *BoltStore) StoreLogs(logs []*raft.Log) error {
	var buf []byte
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLogs)
		for _, l := range logs {
			buf = encodeLog(buf[:0], l)
			// Put keeps a reference to the value until commit: copy it.
			if err := b.Put(indexKey(l.Index), append([]byte(nil), buf...)); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteRange implements raft.LogStore: removes [min, max], inclusive.
func (s *BoltStore) DeleteRange(min, max uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		for k, _ := c.Seek(indexKey(min)); k != nil; k, _ = c.Next() {
			if binary.BigEndian.Uint64(k) > max {
				break
			}
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

// Set implements raft.StableStore.
func (s *BoltStore) Set(key, val []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketStable).Put(key, append([]byte(nil), val...))
	})
}

// Get implements raft.StableStore.
func (s *BoltStore) Get(key []byte) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketStable).Get(key)
		if v == nil {
			return errKeyNotFound
		}
		out = append([]byte(nil), v...)
		return nil
	})
	return out, err
}

// SetUint64 implements raft.StableStore.
func (s *BoltStore) SetUint64(key []byte, val uint64) error { return s.Set(key, indexKey(val)) }

// GetUint64 implements raft.StableStore.
func (s *BoltStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("replica: stable key %q holds %d bytes, want 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// A log record: version byte, term, type, appended-at (Unix ns), data and
// extensions, integers as varints, byte strings length-prefixed.
const logRecordVersion = 1

func encodeLog(b []byte, l *raft.Log) []byte {
	b = append(b, logRecordVersion)
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.AppendVarint(b, at)
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	return append(b, l.Extensions...)
}

var errBadLogRecord = errors.New("replica: corrupt log record")

func decodeLog(v []byte, index uint64, l *raft.Log) error {
	if len(v) < 1 || v[0] != logRecordVersion {
		return fmt.Errorf("%w at index %d", errBadLogRecord, index)
	}
	d := decoder{b: v[1:]}
	term := d.uvarint()
	var typ byte
	if !d.bad && len(d.b) > 0 {
		typ, d.b = d.b[0], d.b[1:]
	} else {
		d.bad = true
	}
	at := d.varint()
	data := d.bytes()
	ext := d.bytes()
	if d.bad || len(d.b) != 0 {
		return fmt.Errorf("%w at index %d", errBadLogRecord, index)
	}
	*l = raft.Log{Index: index, Term: term, Type: raft.LogType(typ),
		Data: clone(data), Extensions: clone(ext)}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	return nil
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
