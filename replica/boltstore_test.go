package replica

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestBoltStoreLogs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	s, err := OpenBoltStore(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := s.FirstIndex(); f != 0 {
		t.Fatalf("empty store: first index %d", f)
	}
	var logs []*raft.Log
	at := time.Unix(1700000000, 123)
	for i := uint64(1); i <= 100; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1 + i/50, Type: raft.LogCommand,
			Data: []byte{byte(i), 2, 3}, Extensions: []byte("x"), AppendedAt: at})
	}
	if err := s.StoreLogs(logs[:60]); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(logs[60]); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(logs[61:]); err != nil {
		t.Fatal(err)
	}
	check := func(s *BoltStore, first, last uint64) {
		t.Helper()
		if f, _ := s.FirstIndex(); f != first {
			t.Fatalf("first index %d, want %d", f, first)
		}
		if l, _ := s.LastIndex(); l != last {
			t.Fatalf("last index %d, want %d", l, last)
		}
		for i := first; i <= last; i++ {
			var l raft.Log
			if err := s.GetLog(i, &l); err != nil {
				t.Fatalf("GetLog(%d): %v", i, err)
			}
			w := logs[i-1]
			if l.Index != i || l.Term != w.Term || l.Type != w.Type || !bytes.Equal(l.Data, w.Data) ||
				!bytes.Equal(l.Extensions, w.Extensions) || !l.AppendedAt.Equal(at) {
				t.Fatalf("GetLog(%d) = %+v, want %+v", i, l, *w)
			}
		}
		var l raft.Log
		if err := s.GetLog(last+1, &l); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog past the end: %v", err)
		}
	}
	check(s, 1, 100)
	// Compaction drops a prefix; a conflicting suffix is truncated.
	if err := s.DeleteRange(1, 40); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(91, 100); err != nil {
		t.Fatal(err)
	}
	check(s, 41, 90)
	// The truncated tail is what raft-wal v0.4.0 failed to reopen after.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenBoltStore(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, 41, 90)
	// Appending after a truncated tail overwrites nothing it should not.
	if err := s.StoreLogs(logs[90:]); err != nil {
		t.Fatal(err)
	}
	check(s, 41, 100)
}

func TestBoltStoreStable(t *testing.T) {
	s, err := OpenBoltStore(filepath.Join(t.TempDir(), "raft.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// raft tells a missing key by the message "not found".
	if _, err := s.Get([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: %v", err)
	}
	if _, err := s.GetUint64([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing uint64 key: %v", err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 42); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 42 {
		t.Fatalf("GetUint64 = %d, %v", v, err)
	}
	val := []byte("node-2")
	if err := s.Set([]byte("LastVoteCand"), val); err != nil {
		t.Fatal(err)
	}
	val[0] = 'X' // the store kept its own copy
	if v, err := s.Get([]byte("LastVoteCand")); err != nil || string(v) != "node-2" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if _, err := s.GetUint64([]byte("LastVoteCand")); err == nil {
		t.Fatalf("GetUint64 of a 6-byte value succeeded")
	}
}

func TestBoltStoreLockedAndCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	s, err := OpenBoltStore(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := OpenBoltStore(path, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second open: %v, want a locked error", err)
	}
	var l raft.Log
	for _, bad := range [][]byte{nil, {9}, {logRecordVersion}, {logRecordVersion, 1, 2, 0, 5, 1}} {
		if err := decodeLog(bad, 7, &l); !errors.Is(err, errBadLogRecord) {
			t.Fatalf("decodeLog(%v) = %v, want errBadLogRecord", bad, err)
		}
	}
}

// BenchmarkBoltStore measures the stable store's write (a term or vote:
// one fsynced bolt transaction) and a 64-entry log batch, as the bbolt
// upgrade was judged on.
func BenchmarkBoltStore(b *testing.B) {
	s, err := OpenBoltStore(filepath.Join(b.TempDir(), "raft.db"), time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.Run("SetUint64", func(b *testing.B) {
		var i uint64
		for b.Loop() {
			i++
			if err := s.SetUint64([]byte("CurrentTerm"), i); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("StoreLogs64", func(b *testing.B) {
		logs := make([]*raft.Log, 64)
		next := uint64(1)
		for b.Loop() {
			for j := range logs {
				logs[j] = &raft.Log{Index: next, Term: 1, Data: make([]byte, 100)}
				next++
			}
			if err := s.StoreLogs(logs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
