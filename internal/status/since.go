package status

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

// stateClock remembers since when each volume has shown its state, for the
// API's "since" field (from which `volume-agent status` shows an age).
//
// The first computation of a pod's status that sees a volume in a new state
// records the time; later ones read it. The Server computes every pod that
// changed as soon as it is told of the change (Notify), so the time is when
// the state changed, to within that delay. A pod's computation and its
// records happen under one lock: the records follow the order of the
// snapshots they come from, and a slow reader holding an older snapshot
// never overwrites the time of a newer state. After a restart every state
// is new: since is at most the agent's start.
type stateClock struct {
	now func() time.Time

	mu   sync.Mutex
	pods map[types.UID]map[string]stamp // guarded by mu; by pod, then desired volume name
}

// stamp is a volume's state and when it was first seen.
type stamp struct {
	state string
	at    time.Time
}

func newStateClock(now func() time.Time) *stateClock {
	if now == nil {
		now = time.Now
	}
	return &stateClock{now: now, pods: map[types.UID]map[string]stamp{}}
}

// pod computes the status of pod uid from w, with the since of each volume.
func (c *stateClock) pod(w Worlds, uid types.UID) (Pod, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := w.Desired.Pod(uid)
	if !ok {
		delete(c.pods, uid)
		return Pod{}, false
	}
	actual, _ := w.Actual.PodVolumes(uid)
	out := w.pod(p, actual)
	stamps := c.pods[uid]
	if stamps == nil || len(stamps) != len(p.Volumes) {
		stamps = c.keepLocked(uid, p.Volumes)
	}
	for i, d := range p.Volumes {
		s, ok := stamps[d.Name]
		if !ok || s.state != out.Volumes[i].State {
			s = stamp{state: out.Volumes[i].State, at: c.now().UTC().Truncate(time.Second)}
			stamps[d.Name] = s
		}
		out.Volumes[i].Since = s.at
	}
	return out, true
}

// keepLocked returns the records of the volumes of pod uid, without those
// of volumes it no longer has.
func (c *stateClock) keepLocked(uid types.UID, volumes []dsw.Volume) map[string]stamp {
	old := c.pods[uid]
	stamps := make(map[string]stamp, len(volumes))
	for _, v := range volumes {
		if s, ok := old[v.Name]; ok {
			stamps[v.Name] = s
		}
	}
	c.pods[uid] = stamps
	return stamps
}

// observe computes the pods that changed (every pod when all), so that the
// time of each new state is recorded when it happens, not when the API is
// next asked; records of pods that went are dropped.
func (c *stateClock) observe(w Worlds, changed []types.UID, all bool) {
	if !all {
		for _, uid := range changed {
			_, _ = c.pod(w, uid)
		}
		return
	}
	desired := map[types.UID]bool{}
	for _, uid := range w.Desired.UIDs() {
		desired[uid] = true
		_, _ = c.pod(w, uid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.pods {
		if !desired[uid] {
			delete(c.pods, uid)
		}
	}
}
