package replica

import (
	"go.etcd.io/raft/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// raftLogLevels are Config.RaftLogLevel's values and the least zap level
// each lets through ("off": none).
var raftLogLevels = map[string]zapcore.Level{"off": zapcore.FatalLevel + 1, "error": zapcore.ErrorLevel,
	"warn": zapcore.WarnLevel, "info": zapcore.InfoLevel, "debug": zapcore.DebugLevel, "trace": zapcore.DebugLevel}

// raftLog is etcd raft's logger: zap at raft's own levels, filtered by
// cfg.RaftLogLevel (Validate has checked it).
func raftLog(cfg Config, log *zap.Logger) raft.Logger {
	lvl := raftLogLevels[cfg.RaftLogLevel]
	// Raft's invariant failures (Panic, Fatal) are never filtered.
	keep := zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		on := func(l zapcore.Level) bool { return (l >= lvl || l >= zapcore.PanicLevel) && c.Enabled(l) }
		ic, _ := zapcore.NewIncreaseLevelCore(c, zap.LevelEnablerFunc(on)) // no error: on is within c
		return ic
	})
	return zapRaftLogger{log.Named("etcdraft").With(zap.String("node_id", cfg.NodeID)).WithOptions(keep).Sugar()}
}

// zapRaftLogger adds raft's names to zap's. Fatal is raft's invariant
// failure: it panics rather than exits, so deferred cleanup still runs.
type zapRaftLogger struct{ *zap.SugaredLogger }

func (z zapRaftLogger) Warning(v ...any) { z.Warn(v...) }

func (z zapRaftLogger) Warningf(f string, v ...any) { z.Warnf(f, v...) }

func (z zapRaftLogger) Fatal(v ...any) { z.Panic(v...) }

func (z zapRaftLogger) Fatalf(f string, v ...any) { z.Panicf(f, v...) }
