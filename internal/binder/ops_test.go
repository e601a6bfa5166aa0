package binder

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestBackoffCap: a call that keeps failing by itself (a cause the
// operator fixes, such as quotas off) is retried at least every
// fixRetryMax, a few seconds; one that keeps running into its deadline
// (hung storage) at least every minute; the failed writes of the records
// at least every minute too. The same failure again is logged at debug
// level, a new one as a warning.
func TestBackoffCap(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	ops := newOperations(nil, nil, 0, zap.New(core))
	fixable := errors.New("btrfs quotas are off on the local path root /r: turn them on (btrfs quota enable /r)")
	hung := fmt.Errorf("provision: %w", context.DeadlineExceeded)
	for _, c := range []struct {
		name string
		err  error
		max  time.Duration
	}{
		{"fixable", fixable, 5 * time.Second},
		{"hung", hung, time.Minute},
	} {
		var last time.Duration
		for i := range 20 {
			ops.st.running[c.name] = true
			ops.finish(opResult{pv: c.name, what: "provision", err: c.err})
			last = ops.backoff[c.name].delay
			if last > c.max || last <= 0 {
				t.Fatalf("%s: backoff after %d failures %v; want in (0, %v]", c.name, i+1, last, c.max)
			}
		}
		if last != c.max {
			t.Errorf("%s: backoff after 20 failures %v; want the cap %v", c.name, last, c.max)
		}
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 2 {
		t.Errorf("%d warnings for two causes failing 20 times each; want 2", n)
	}

	r := retry{min: retryMin}
	defer r.stop()
	for range 20 {
		r.update(true)
	}
	if r.delay > time.Minute {
		t.Errorf("the failed writes of the records back off %v; want at most a minute", r.delay)
	}
}
