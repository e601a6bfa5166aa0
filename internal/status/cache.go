package status

import (
	"bytes"
	"encoding/json"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

// podCache keeps the JSON of every pod's status for GET /v1/pods, so that
// the answer after one change computes and encodes that pod only. It
// forgets a pod's entry when either world names the pod as changed.
type podCache struct {
	worlds Worlds
	// desired and actual are taken before any entry is computed: a change
	// during the computation stays in them and is seen next time.
	desired, actual *dsw.Changes
	// usage names the pods whose usage was measured again; nil without
	// Worlds.Usage.
	usage *dsw.Changes

	mu      sync.Mutex           // held while an answer is built
	entries map[types.UID][]byte // guarded by mu; JSON as it stands in the answer
}

func newPodCache(w Worlds) *podCache {
	c := &podCache{worlds: w, desired: w.Desired.Watch(), actual: w.Actual.Watch(), entries: map[types.UID][]byte{}}
	if w.Usage != nil {
		c.usage = w.Usage.Watch()
	}
	return c
}

// Indentation of a pod in the answer of GET /v1/pods, as writeJSON
// indents {"pods": [...]}.
const (
	podPrefix = "    "
	indent    = "  "
)

// pods returns the body of GET /v1/pods: what writeJSON writes for
// {"pods": Worlds.Pods()}.
func (c *podCache) pods() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetChanged()
	uids := c.worlds.uids()
	entries := make([][]byte, 0, len(uids))
	size := 0
	for _, uid := range uids {
		if entry, ok := c.entry(uid); ok { // not gone since uids
			entries = append(entries, entry)
			size += len(podPrefix) + len(entry) + 2
		}
	}
	var b bytes.Buffer
	b.Grow(size + 32)
	b.WriteString("{\n" + indent + `"pods": [`)
	for i, entry := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n" + podPrefix)
		b.Write(entry)
	}
	if len(entries) > 0 {
		b.WriteString("\n" + indent)
	}
	b.WriteString("]\n}\n")
	return b.Bytes()
}

// forgetChanged drops the entries of the pods that changed.
func (c *podCache) forgetChanged() {
	desired, allDesired := c.desired.Take()
	actual, allActual := c.actual.Take()
	if allDesired || allActual {
		clear(c.entries)
		return
	}
	for _, uid := range desired {
		delete(c.entries, uid)
	}
	for _, uid := range actual {
		delete(c.entries, uid)
	}
	if c.usage == nil {
		return
	}
	measured, allMeasured := c.usage.Take()
	if allMeasured {
		clear(c.entries)
	}
	for _, uid := range measured {
		delete(c.entries, uid)
	}
}

// entry returns the JSON of pod uid, computing it when it is not cached.
func (c *podCache) entry(uid types.UID) ([]byte, bool) {
	if entry, ok := c.entries[uid]; ok {
		return entry, true
	}
	p, ok := c.worlds.Pod(string(uid))
	if !ok {
		return nil, false
	}
	entry, err := json.MarshalIndent(p, podPrefix, indent)
	if err != nil {
		return nil, false // a Pod is plain data: never happens
	}
	c.entries[uid] = entry
	return entry, true
}
