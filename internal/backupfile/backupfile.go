// Package backupfile is the file `latchctl snapshot save` writes and
// `latchd --restore` reads: a fixed header, then the state.
//
// The header is the magic "LTCHBKUP", a version byte, three zero bytes,
// then big-endian uint64s: the raft index the state reflects (0 on a
// single node), the highest fence number issued before it, the time it was
// taken (Unix nanoseconds) and the length of the body; then the SHA-256 of
// everything before it and of the body. The body is the state as a
// cluster's snapshot holds it (replica.FSM). A damaged or foreign file is
// refused with an error naming the file and what is wrong.
package backupfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Magic opens every backup file; Version is the header's format version.
const (
	Magic   = "LTCHBKUP"
	Version = 1
)

// HeaderSize is the length of the header, checksum included.
const HeaderSize = len(Magic) + 4 + 4*8 + sha256.Size

// Errors a refused file wraps (errors.Is), each with the file's name and
// the detail.
var (
	ErrNotBackup = errors.New("not a latchd backup")
	ErrVersion   = errors.New("unsupported backup format version")
	ErrTruncated = errors.New("truncated")
	ErrChecksum  = errors.New("checksum mismatch: the file is corrupt")
)

// Meta is what the header says of the state.
type Meta struct {
	Index   uint64    // the raft index the state reflects; 0 on a single node
	Fence   uint64    // the highest fence number issued before the copy
	Created time.Time // when the copy was taken
}

// Encode returns the file of body with m's header.
func Encode(m Meta, body []byte) []byte {
	b := make([]byte, 0, HeaderSize+len(body))
	b = append(b, Magic...)
	b = append(b, Version, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, m.Index)
	b = binary.BigEndian.AppendUint64(b, m.Fence)
	b = binary.BigEndian.AppendUint64(b, uint64(m.Created.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	sum := checksum(b, body)
	b = append(b, sum[:]...)
	return append(b, body...)
}

func checksum(head, body []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(head)
	h.Write(body)
	var s [sha256.Size]byte
	h.Sum(s[:0])
	return s
}

// Decode checks the file data (named name in errors) and returns its
// header and body; the body is a slice of data.
func Decode(name string, data []byte) (Meta, []byte, error) {
	fail := func(err error, format string, args ...any) (Meta, []byte, error) {
		return Meta{}, nil, fmt.Errorf("%s: %w%s", name, err, fmt.Sprintf(format, args...))
	}
	if len(data) < len(Magic)+1 {
		if bytes.HasPrefix([]byte(Magic), data) {
			return fail(ErrTruncated, ": %d bytes, the header alone is %d", len(data), HeaderSize)
		}
		return fail(ErrNotBackup, " (%d bytes, no magic)", len(data))
	}
	if string(data[:len(Magic)]) != Magic {
		return fail(ErrNotBackup, " (bad magic %q)", data[:len(Magic)])
	}
	if v := data[len(Magic)]; v != Version {
		return fail(ErrVersion, " %d: this latchd reads version %d", v, Version)
	}
	if len(data) < HeaderSize {
		return fail(ErrTruncated, ": %d bytes, the header alone is %d", len(data), HeaderSize)
	}
	p := len(Magic) + 4
	field := func() uint64 { v := binary.BigEndian.Uint64(data[p:]); p += 8; return v }
	m := Meta{Index: field(), Fence: field(), Created: time.Unix(0, int64(field()))}
	n := field()
	if rest := uint64(len(data) - HeaderSize); n != rest {
		if n > rest {
			return fail(ErrTruncated, ": the header announces %d bytes of state, the file holds %d", n, rest)
		}
		return fail(ErrChecksum, " (%d bytes after the %d bytes of state the header announces)", rest-n, n)
	}
	body := data[HeaderSize:]
	if sum := checksum(data[:p], body); !bytes.Equal(sum[:], data[p:HeaderSize]) {
		return fail(ErrChecksum, "")
	}
	return m, body, nil
}

// Sum returns the checksum the file data carries in its header, in hex
// (it identifies one backup); data must have passed Decode.
func Sum(data []byte) string {
	return hex.EncodeToString(data[HeaderSize-sha256.Size : HeaderSize])
}

// ReadFile reads and checks the backup at path.
func ReadFile(path string) (Meta, []byte, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Meta{}, nil, nil, err
	}
	m, body, err := Decode(path, data)
	return m, body, data, err
}

// WriteFile writes data to path durably and atomically: a temporary file
// in the same directory, fsync, rename over path, fsync of the directory.
// A reader sees the old file or the whole new one, never part of it.
func WriteFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
