package status

import (
	"bytes"
	"net/http"
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

	mu      sync.Mutex              // held while an answer is built
	entries map[types.UID]cachedPod // guarded by mu
	// scratch is where a pod is encoded before its entry is copied out,
	// as large as the largest pod's JSON; guarded by mu.
	scratch []byte
}

// cachedPod is the JSON of a pod's status as GET /v1/pods/UID answers it
// (writeJSON's encoding, written by appendPod), and the Ready of the
// status it encodes.
type cachedPod struct {
	json  []byte
	ready bool
}

func newPodCache(w Worlds) *podCache {
	c := &podCache{worlds: w, desired: w.Desired.Watch(), actual: w.Actual.Watch(), entries: map[types.UID]cachedPod{}}
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
			entries = append(entries, entry.json)
			size += len(podPrefix) + len(entry.json) + bytes.Count(entry.json, newline)*len(podPrefix) + 2
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
		writeIndented(&b, entry)
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

// pod returns the entry of pod uid as it stands now: for
// GET /v1/pods/UID, which answers it (see writeEntry) rather than encoding
// the same status again.
func (c *podCache) pod(uid types.UID) (cachedPod, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetChanged()
	return c.entry(uid)
}

// entry returns the JSON of pod uid, computing it when it is not cached.
func (c *podCache) entry(uid types.UID) (cachedPod, bool) {
	if entry, ok := c.entries[uid]; ok {
		return entry, true
	}
	p, ok := c.worlds.Pod(string(uid))
	if !ok {
		return cachedPod{}, false
	}
	var err error
	c.scratch, err = appendPod(c.scratch[:0], &p)
	if err != nil {
		return cachedPod{}, false // a Pod is plain data: never happens
	}
	b := make([]byte, len(c.scratch)+1) // kept while cached: no room to spare
	copy(b, c.scratch)
	b[len(b)-1] = '\n'
	entry := cachedPod{json: b, ready: p.Ready}
	c.entries[uid] = entry
	return entry, true
}

var newline = []byte("\n")

// writeIndented writes entry into b as it stands in the answer of
// GET /v1/pods: podPrefix after each newline, without the last. JSON
// escapes the newlines of strings, so every newline in entry starts a line
// of the encoding.
func writeIndented(b *bytes.Buffer, entry []byte) {
	rest := bytes.TrimSuffix(entry, newline)
	for {
		line, after, more := bytes.Cut(rest, newline)
		b.Write(line)
		if !more {
			return
		}
		b.WriteString("\n" + podPrefix)
		rest = after
	}
}

// writeEntry answers entry: what writeJSON writes for its pod.
func writeEntry(w http.ResponseWriter, code int, entry cachedPod) {
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(code)
	_, _ = w.Write(entry.json)
}
