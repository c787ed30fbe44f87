//go:build !linux

package replica

import (
	"os"
	"sync"
)

// fdatasync is f.Sync where the system has no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }
