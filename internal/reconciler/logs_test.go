package reconciler

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

// observed returns a harness whose reconciler logs into an observer, from
// debug level up.
func observed(t *testing.T) (*harness, *zapobserver.ObservedLogs) {
	core, logs := zapobserver.New(zap.DebugLevel)
	return newHarness(t, func(c *Config) { c.Logger = zap.New(core) }), logs
}

// waitLog waits for the first entry with message msg and returns it.
func waitLog(t *testing.T, logs *zapobserver.ObservedLogs, msg string) zapobserver.LoggedEntry {
	t.Helper()
	var e zapobserver.LoggedEntry
	waitFor(t, fmt.Sprintf("log %q", msg), func() bool {
		found := logs.FilterMessage(msg).All()
		if len(found) > 0 {
			e = found[0]
		}
		return len(found) > 0
	})
	return e
}

// checkEntry checks an entry's level and that its fields include want;
// a want of nil asks only that the field be there.
func checkEntry(t *testing.T, e zapobserver.LoggedEntry, level zapcore.Level, want map[string]any) {
	t.Helper()
	if e.Level != level {
		t.Errorf("%q logged at %s, want %s", e.Message, e.Level, level)
	}
	got := e.ContextMap()
	for k, v := range want {
		if g, ok := got[k]; !ok || (v != nil && g != v) {
			t.Errorf("%q: field %s = %v (present %v), want %v; fields %v", e.Message, k, g, ok, v, got)
		}
	}
}

// checkOneLine fails for any entry whose message or string fields span
// lines.
func checkOneLine(t *testing.T, logs *zapobserver.ObservedLogs) {
	t.Helper()
	for _, e := range logs.All() {
		if strings.ContainsAny(e.Message, "\r\n") {
			t.Errorf("message %q spans lines", e.Message)
		}
		for k, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.ContainsAny(s, "\r\n") {
				t.Errorf("%q: field %s = %q spans lines", e.Message, k, s)
			}
		}
	}
}

// Set-ups and teardowns log their completion at info level with their
// duration, and their failures at warn level; every line names the pod by
// namespace/name and UID, the volume by its name in the pod's spec, and a
// claim's PersistentVolume in a field of its own, even once the pod has
// left the desired state. Errors with a tool's output on several lines are
// logged, and shown, on one.
func TestLogLevelsAndFields(t *testing.T) {
	h, logs := observed(t)
	claim := desiredVolume("pv-1", "1")
	claim.SpecName, claim.Claim, claim.PV = "data", "db", "pv-1"
	h.desired.SetPod(desiredPod("p1", claim))
	h.desired.MarkPopulated()
	h.start(t)
	h.waitMounted(t, "p1", "pv-1", "1")
	named := map[string]any{"pod": "ns/p1", "podUID": "p1", "volume": "data", "pv": "pv-1", "plugin": testPlugin}
	withDuration := func(m map[string]any) map[string]any {
		out := map[string]any{"duration": nil}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	checkEntry(t, waitLog(t, logs, "volume set up"), zapcore.InfoLevel, withDuration(named))

	// The pod goes; its teardown fails, then succeeds.
	h.plugin.set(func(p *fakePlugin) {
		p.failTearDown = fmt.Errorf("remove x: %w", errors.New("mount points remain:\n[x/sub]"))
	})
	h.desired.DeletePod("p1")
	failed := waitLog(t, logs, "volume teardown failed")
	checkEntry(t, failed, zapcore.WarnLevel, withDuration(named))
	if got := failed.ContextMap()["error"]; got != "remove x: mount points remain:; [x/sub]" {
		t.Errorf("teardown error logged as %q", got)
	}
	if v, _ := h.actualVolume("p1", "pv-1"); v.TearDownError != "remove x: mount points remain:; [x/sub]" {
		t.Errorf("actual volume %+v, want the teardown's error", v)
	}
	h.plugin.set(func(p *fakePlugin) { p.failTearDown = nil })
	checkEntry(t, waitLog(t, logs, "volume torn down"), zapcore.InfoLevel, withDuration(named))
	checkEntry(t, waitLog(t, logs, "pod directory removed"), zapcore.InfoLevel, map[string]any{"pod": "ns/p1", "podUID": "p1", "duration": nil})

	// A set-up fails with mount(8)'s report on several lines.
	h.plugin.set(func(p *fakePlugin) {
		p.fail = errors.New("mount failed: exit status 32\nMounting command: mount\nOutput: access denied\n")
	})
	h.desired.SetPod(desiredPod("p2", desiredVolume("cache", "1")))
	e := waitLog(t, logs, "volume set-up failed")
	checkEntry(t, e, zapcore.WarnLevel, map[string]any{"pod": "ns/p2", "podUID": "p2", "volume": "cache", "operation": "setup", "duration": nil,
		"error": "mount failed: exit status 32; Mounting command: mount; Output: access denied"})
	if _, ok := e.ContextMap()["pv"]; ok {
		t.Errorf("a volume that is not a claim's logged with a pv: %v", e.ContextMap())
	}
	if got := h.desired.Error(dsw.Key{PodUID: types.UID("p2"), Volume: "cache"}); strings.Contains(got, "\n") {
		t.Errorf("the status would show the error on several lines: %q", got)
	}

	// A refresh that fails keeps the old content: warn.
	h.plugin.set(func(p *fakePlugin) { p.fail = nil })
	h.waitMounted(t, "p2", "cache", "1")
	h.plugin.set(func(p *fakePlugin) { p.fail = errInjected })
	h.desired.SetPod(desiredPod("p2", desiredVolume("cache", "2")))
	checkEntry(t, waitLog(t, logs, "volume refresh failed; the volume keeps its old content"), zapcore.WarnLevel,
		map[string]any{"pod": "ns/p2", "volume": "cache", "operation": "refresh"})

	checkOneLine(t, logs)
	for _, e := range logs.FilterLevelExact(zapcore.InfoLevel).All() {
		if strings.Contains(e.Message, "fail") {
			t.Errorf("a failure logged at info level: %q", e.Message)
		}
	}
}
