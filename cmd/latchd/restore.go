package main

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/httpfast"
	"github.com/latchd/latchd/internal/clock"
	"github.com/latchd/latchd/replica"
)

// Backups: GET /v1/admin/snapshot (latchctl snapshot save) and --restore.

func (o *options) restoreFlags(g *flagGroup) {
	g.strFlag(&o.restore, "restore", "", "start from a backup (latchctl snapshot save): every fence issued is above the backup's highest; holders, waiters and sessions in it are not restored. In cluster mode it seeds an empty --raft-dir and needs --bootstrap; a restart with the same file starts from the raft dir")
	g.boolFlag(&o.restoreForce, "restore-force", false, "with --restore, delete what a non-empty --raft-dir holds instead of refusing to start")
}

// restoreOptions checks --restore and reads the backup: a file that is
// cut short, corrupt or of another format stops latchd here.
func (o *options) restoreOptions() error {
	if o.restore == "" {
		if o.restoreForce {
			return errors.New("--restore-force goes with --restore")
		}
		return nil
	}
	if o.raftDir != "" && (!o.bootstrap || o.join != "") {
		return errors.New("--restore seeds a new cluster: give it --bootstrap (and the new cluster's --cluster-peers), not --join; " +
			"the nodes that join get the state from the cluster")
	}
	info, err := replica.ReadBackup(o.restore)
	if err != nil {
		return fmt.Errorf("--restore: %w", err)
	}
	o.backup = &info
	return nil
}

// backupFields are the log fields of a backup.
func backupFields(o *options) []zap.Field {
	b := o.backup
	return []zap.Field{zap.String("file", o.restore), zap.Uint64("index", b.Index), zap.Uint64("fence_floor", b.Floor),
		zap.Time("taken", b.Created), zap.Int("held_not_restored", b.Held), zap.Int("waiting_not_restored", b.Waiting),
		zap.Int("sessions_not_restored", b.Sessions)}
}

// restoreEngine raises a single node's fence counter above the backup's.
func (d *daemon) restoreEngine(eng *engine.Engine) {
	if d.o.backup == nil {
		return
	}
	eng.RaiseFence(d.o.backup.Floor)
	d.log.Info("restored from a backup", backupFields(d.o)...)
}

// seedRaftDir seeds a new cluster node's raft dir from the backup, and
// makes its floor the node's fence floor too.
func seedRaftDir(o *options, rcfg *replica.Config, log *zap.Logger) error {
	if o.backup == nil {
		return nil
	}
	rcfg.FenceFloor = max(rcfg.FenceFloor, o.backup.Floor)
	seeded, err := replica.SeedRaftDir(*rcfg, replica.Seed{Index: o.backup.Index, Floor: o.backup.Floor, Sum: o.backup.Sum}, o.restoreForce)
	if err != nil {
		return fmt.Errorf("--restore %s: %w", o.restore, err)
	}
	if !seeded {
		log.Info("raft dir already seeded from this backup: starting from it", zap.String("file", o.restore), zap.String("raft_dir", o.raftDir))
		return nil
	}
	log.Info("raft dir seeded from a backup", append(backupFields(o), zap.String("raft_dir", o.raftDir))...)
	return nil
}

// snapshotOption serves GET /v1/admin/snapshot with --admin-token.
func (d *daemon) snapshotOption() []httpfast.Option {
	if d.o.adminToken == "" {
		return nil
	}
	fn := func(context.Context) ([]byte, error) { return replica.EngineBackup(d.eng, clock.Now()), nil }
	if d.node != nil {
		fn = d.node.Backup
	}
	return []httpfast.Option{httpfast.WithSnapshot(fn, d.o.adminToken)}
}
