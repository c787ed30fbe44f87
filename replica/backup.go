package replica

import (
	"context"
	"fmt"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/backupfile"
)

// Online backups (latchctl snapshot save) and what latchd --restore reads
// of them. The body of a backup is the FSM's state, as a snapshot holds
// it (on a single node, with index 0).

// Backup returns a backup file of the node's state once ReadBarrier
// returned, so it holds every change acknowledged before the call; the
// copy is taken as a snapshot's. It fails as ReadBarrier does.
func (n *Node) Backup(ctx context.Context) ([]byte, error) {
	if err := n.Barrier(ctx); err != nil {
		return nil, err
	}
	f := n.fsm
	f.mu.Lock() // no entry applies meanwhile: index, header, counter and capture agree
	head := f.appendHeaderLocked(nil)
	idx := f.index.Load()
	e := f.eng.Load()
	fence := e.LastFence()
	c := e.CaptureState()
	f.mu.Unlock()
	body := c.Finish(head)
	return backupfile.Encode(backupfile.Meta{Index: idx, Fence: fence, Created: time.Now()}, body), nil
}

// EngineBackup returns a backup file of a single node's engine, changed by
// other goroutines meanwhile: its state at one moment
// (engine.CaptureStateNow), as an FSM at index 0 whose clock reads now.
func EngineBackup(e *engine.Engine, now int64) []byte {
	head := (&FSM{lastNow: now}).appendHeaderLocked(nil)
	body := e.CaptureStateNow().Finish(head)
	// Read after the capture: at least every fence in it.
	fence := e.LastFence()
	return backupfile.Encode(backupfile.Meta{Fence: fence, Created: time.Now()}, body)
}

// BackupInfo is what ReadBackup found in a backup file.
type BackupInfo struct {
	backupfile.Meta
	// Sum identifies the file (its header's checksum).
	Sum string
	// Floor is the highest fence the backup knows of: its header's and
	// its state's counter, whichever is higher. Every fence issued after
	// a restore is above it.
	Floor uint64
	// What the state held when it was taken.
	Keys, Held, Waiting, Sessions int
}

// ReadBackup reads and checks the backup file at path: its header and
// checksum, and its state, which must read whole. Errors name the file
// and what is wrong with it.
func ReadBackup(path string) (BackupInfo, error) {
	m, body, data, err := backupfile.ReadFile(path)
	if err != nil {
		return BackupInfo{}, err
	}
	e, err := readBackupState(body)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("%s: the state inside does not read: %w", path, err)
	}
	_, g := e.Metrics()
	return BackupInfo{Meta: m, Sum: backupfile.Sum(data), Floor: max(m.Fence, e.LastFence()),
		Keys: g.Keys, Held: g.Held, Waiting: g.Waiting, Sessions: g.Sessions}, nil
}

// readBackupState restores body, an FSM state, into an engine shaped as
// its writer's was (the shard count it names; no caps), whatever the
// restoring node's flags.
func readBackupState(body []byte) (*engine.Engine, error) {
	shards, err := stateShards(body)
	if err != nil {
		return nil, err
	}
	cfg := engine.DefaultConfig()
	cfg.Shards, cfg.MaxKeys, cfg.MaxKeysPerOwner = shards, 0, 0
	f, err := NewFSM(cfg, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	if err := f.Restore(body); err != nil {
		return nil, err
	}
	return f.Engine(), nil
}

// stateShards returns the shard count the engine state in an FSM state
// names: the FSM header (see appendHeaderLocked), then the engine's magic
// "LTCHST", its version and the count.
func stateShards(all []byte) (int, error) {
	if len(all) < len(snapMagic)+1 || string(all[:len(snapMagic)]) != snapMagic {
		return 0, fmt.Errorf("%w: no state header", ErrBadSnapshot)
	}
	version := all[len(snapMagic)]
	d := decoder{b: all[len(snapMagic)+1:]}
	d.uvarint()
	d.varint()
	n := d.uvarint()
	for range min(n, uint64(len(d.b))) {
		d.bytes()
		d.bytes()
		if version >= snapVersionV2 {
			d.bytes()
		}
	}
	const engineMagic = "LTCHST"
	if d.bad || len(d.b) < len(engineMagic)+1 || string(d.b[:len(engineMagic)]) != engineMagic {
		return 0, fmt.Errorf("%w: no engine state", ErrBadSnapshot)
	}
	d.b = d.b[len(engineMagic)+1:]
	shards := d.uvarint()
	if d.bad || shards < 1 || shards > 1<<20 || shards&(shards-1) != 0 {
		return 0, fmt.Errorf("%w: bad shard count %d", ErrBadSnapshot, shards)
	}
	return int(shards), nil
}
