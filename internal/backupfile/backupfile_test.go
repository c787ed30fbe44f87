package backupfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sample() ([]byte, Meta) {
	m := Meta{Index: 42, Fence: 1 << 61, Created: time.Unix(1700000000, 5)}
	return Encode(m, []byte("the state, as a snapshot holds it")), m
}

// TestRoundTrip: Decode gives back the header and the body Encode wrote.
func TestRoundTrip(t *testing.T) {
	data, m := sample()
	got, body, err := Decode("f", data)
	if err != nil || got.Index != m.Index || got.Fence != m.Fence || !got.Created.Equal(m.Created) || string(body) != "the state, as a snapshot holds it" {
		t.Fatalf("Decode = %+v, %q, %v; want %+v and the body", got, body, err, m)
	}
}

// TestRefused: each kind of damage is refused with its error and the
// file's name.
func TestRefused(t *testing.T) {
	good, _ := sample()
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		data []byte
		want error
		says string
	}{
		{"empty", nil, ErrTruncated, "0 bytes"},
		{"short other file", []byte("abc"), ErrNotBackup, "no magic"},
		{"other file", []byte("PK\x03\x04 a zip file, say, long enough"), ErrNotBackup, "bad magic"},
		{"bad magic", edit(func(b []byte) []byte { b[0] = 'X'; return b }), ErrNotBackup, "bad magic"},
		{"newer version", edit(func(b []byte) []byte { b[len(Magic)] = Version + 1; return b }), ErrVersion, "version 2"},
		{"cut in the magic", good[:3], ErrTruncated, "header"},
		{"cut in the header", good[:HeaderSize-1], ErrTruncated, "header"},
		{"cut in the body", good[:len(good)-1], ErrTruncated, "announces"},
		{"a byte added", append(bytes.Clone(good), 0), ErrChecksum, "after"},
		{"index flipped", edit(func(b []byte) []byte { b[len(Magic)+4] ^= 1; return b }), ErrChecksum, ""},
		{"fence flipped", edit(func(b []byte) []byte { b[len(Magic)+12] ^= 1; return b }), ErrChecksum, ""},
		{"body flipped", edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ErrChecksum, ""},
		{"checksum flipped", edit(func(b []byte) []byte { b[HeaderSize-1] ^= 1; return b }), ErrChecksum, ""},
	}
	for _, c := range cases {
		_, _, err := Decode("/backups/x.latchd", c.data)
		if !errors.Is(err, c.want) || !strings.HasPrefix(err.Error(), "/backups/x.latchd: ") || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want %v naming the file, saying %q", c.name, err, c.want, c.says)
		}
	}
}

// TestWriteFileAtomic: WriteFile replaces a file whole and leaves no
// temporary file behind.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "b")
	for _, s := range []string{"first", "second, longer"} {
		if err := WriteFile(path, []byte(s)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != s {
			t.Fatalf("read %q, %v; want %q", got, err, s)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("%d files in the directory; want the backup alone", len(ents))
	}
	if err := WriteFile(filepath.Join(dir, "missing", "b"), []byte("x")); err == nil {
		t.Fatal("WriteFile into a missing directory: no error")
	}
}

// FuzzDecode: no input panics Decode, and one it accepts is what Encode
// writes of its header and body.
func FuzzDecode(f *testing.F) {
	good, _ := sample()
	f.Add(good)
	f.Add(good[:HeaderSize])
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, body, err := Decode("f", data)
		if err != nil {
			return
		}
		if again := Encode(m, body); !bytes.Equal(again, data) {
			t.Fatalf("accepted %d bytes that Encode writes as %d", len(data), len(again))
		}
	})
}
