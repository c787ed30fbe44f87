package replica

import (
	"go.etcd.io/raft/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// raftLog is etcd raft's logger: zap at raft's own levels, filtered by
// cfg.RaftLogLevel ("off" drops everything).
func raftLog(cfg Config, log *zap.Logger) raft.Logger {
	lvl := zapcore.InvalidLevel // off
	switch cfg.RaftLogLevel {
	case "trace", "debug":
		lvl = zapcore.DebugLevel
	case "info":
		lvl = zapcore.InfoLevel
	case "warn":
		lvl = zapcore.WarnLevel
	case "error":
		lvl = zapcore.ErrorLevel
	}
	return &zapRaftLogger{l: log.Named("etcdraft").With(zap.String("node_id", cfg.NodeID)).Sugar(), min: lvl}
}

type zapRaftLogger struct {
	l   *zap.SugaredLogger
	min zapcore.Level
}

func (z *zapRaftLogger) on(l zapcore.Level) bool { return z.min != zapcore.InvalidLevel && l >= z.min }

func (z *zapRaftLogger) Debug(v ...any) {
	if z.on(zapcore.DebugLevel) {
		z.l.Debug(v...)
	}
}

func (z *zapRaftLogger) Debugf(f string, v ...any) {
	if z.on(zapcore.DebugLevel) {
		z.l.Debugf(f, v...)
	}
}

func (z *zapRaftLogger) Info(v ...any) {
	if z.on(zapcore.InfoLevel) {
		z.l.Info(v...)
	}
}

func (z *zapRaftLogger) Infof(f string, v ...any) {
	if z.on(zapcore.InfoLevel) {
		z.l.Infof(f, v...)
	}
}

func (z *zapRaftLogger) Warning(v ...any) {
	if z.on(zapcore.WarnLevel) {
		z.l.Warn(v...)
	}
}

func (z *zapRaftLogger) Warningf(f string, v ...any) {
	if z.on(zapcore.WarnLevel) {
		z.l.Warnf(f, v...)
	}
}

func (z *zapRaftLogger) Error(v ...any) {
	if z.on(zapcore.ErrorLevel) {
		z.l.Error(v...)
	}
}

func (z *zapRaftLogger) Errorf(f string, v ...any) {
	if z.on(zapcore.ErrorLevel) {
		z.l.Errorf(f, v...)
	}
}

// Fatal and Panic are raft's invariant failures: never filtered, and
// they panic rather than exit, so deferred cleanup still runs.
func (z *zapRaftLogger) Fatal(v ...any) { z.l.Panic(v...) }

func (z *zapRaftLogger) Fatalf(f string, v ...any) { z.l.Panicf(f, v...) }

func (z *zapRaftLogger) Panic(v ...any) { z.l.Panic(v...) }

func (z *zapRaftLogger) Panicf(f string, v ...any) { z.l.Panicf(f, v...) }
