package main

import (
	"fmt"

	"github.com/go-logr/zapr"
	"k8s.io/klog/v2"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/volume-agent/volume-agent/internal/mount"
)

// newLogger builds the one logger the agent uses; components name it.
func newLogger(level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.Development = false
		cfg.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("--log-format %q: want console or json", format)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil
	return cfg.Build()
}

// routeKlog sends klog output (from mount-utils and client-go) through zap.
func routeKlog(log *zap.Logger) {
	klog.SetLogger(zapr.NewLogger(klogLogger(log)))
}

// klogLogger is the logger klog writes to: named "klog", one line per
// entry — mount-utils logs a failed mount with mount(8)'s command and
// output on lines of their own — and errors at warn level: a library's
// error is a failure the agent retries and reports itself (a failed mount,
// a watch that breaks), never one it cannot recover from.
func klogLogger(log *zap.Logger) *zap.Logger {
	return log.Named("klog").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return klogCore{c} }))
}

// klogCore folds the messages of the entries it writes onto one line, and
// writes errors as warnings.
type klogCore struct{ zapcore.Core }

func (c klogCore) With(fields []zapcore.Field) zapcore.Core { return klogCore{c.Core.With(fields)} }

func (c klogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Level == zapcore.ErrorLevel {
		e.Level = zapcore.WarnLevel
	}
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c klogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	e.Message = mount.Fold(e.Message)
	return c.Core.Write(e, fields)
}
