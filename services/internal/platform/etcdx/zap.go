package etcdx

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapLogger returns a zap logger that forwards entries at level and above
// to log, or a no-op logger if log is nil.
// Entries stop once mute is set: etcd reports its own orderly shutdown as
// errors ("use of closed network connection"), which would only be noise.
func zapLogger(log *slog.Logger, level zapcore.Level, mute *atomic.Bool) *zap.Logger {
	if log == nil {
		return zap.NewNop()
	}
	return zap.New(&slogCore{log: log.With(slog.String("component", "etcd")), level: level, mute: mute})
}

// slogCore is a zapcore.Core writing to slog.
type slogCore struct {
	log    *slog.Logger
	level  zapcore.Level
	fields []zapcore.Field
	mute   *atomic.Bool
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.level && !c.mute.Load() }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, level: c.level, fields: slices.Concat(c.fields, fields), mute: c.mute}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range slices.Concat(c.fields, fields) {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	slices.SortFunc(attrs, func(a, b slog.Attr) int { return strings.Compare(a.Key, b.Key) })
	// etcd's zap messages are static strings, so they serve as slog
	// messages as they are.
	c.log.LogAttrs(context.Background(), slogLevel(e.Level), e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}
