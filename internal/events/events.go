// Package events reports volume set-up outcomes as Kubernetes Events on the
// pod, with the kubelet's reasons: FailedMount for each failed set-up, and
// one SuccessfulMountVolume per pod, sent by the set-up that makes it ready
// (one per volume was an API request and an etcd write per volume, which is
// why the kubelet stopped sending it on success; one per pod keeps a sign
// that the pod's volumes are in place, and that the agent's identity may
// send events);
// SizeLimitExceeded when a disk emptyDir passes its sizeLimit; and
// LimitNotEnforced when a volume's btrfs qgroup limit is found gone (a
// claim's too: a claim has no event path of its own, its pod gets it).
// client-go's event correlator aggregates repeats and rate-limits each
// pod's events (a burst of 25, then one per 5 minutes), so a failing volume
// retried with backoff cannot flood the API server.
//
// Only pods that came from the API server get events; static pods from the
// manifest directory do not exist there. Event messages carry errors, which
// never hold ConfigMap or Secret content.
package events

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// Kubelet event reasons, and SizeLimitExceeded: a disk emptyDir used more
// than its sizeLimit (the kubelet evicts such a pod, with reason Evicted;
// the agent only says so).
const (
	ReasonSuccessfulMount   = "SuccessfulMountVolume"
	ReasonFailedMount       = "FailedMount"
	ReasonSizeLimitExceeded = "SizeLimitExceeded"
	// ReasonLimitNotEnforced: the btrfs qgroup limit of a volume (a disk
	// emptyDir's sizeLimit, an enforced claim's size) is gone, or could not
	// be made (quotas off); the agent makes it again at each measurement.
	ReasonLimitNotEnforced = "LimitNotEnforced"
)

// Config configures a Recorder.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	// Source is the pod source whose pods get events (the API server's).
	Source string
	// Ready reports whether a pod is ready (every volume set up, as the
	// status API says): a pod's SuccessfulMountVolume is sent by the first
	// successful set-up after which it is. Nil: the first set-up of a pod
	// sends it.
	Ready func(types.UID) bool
}

// maxEarly bounds the events kept from before Run starts, as the
// broadcaster bounds its own queue.
const maxEarly = 1000

// Recorder sends events. Create with New; Run owns the broadcaster.
type Recorder struct {
	cfg Config

	mu       sync.Mutex
	recorder record.EventRecorder // guarded by mu; set while Run runs
	early    []event              // guarded by mu; reported before Run started, sent when it does
	stopped  bool                 // guarded by mu; set when Run returns: later events are dropped
	// announced are the pods whose SuccessfulMountVolume was sent, until
	// they leave the desired state (ForgetPod): at most the node's pods.
	announced map[types.UID]bool // guarded by mu
}

// event is one event reported before Run started.
type event struct {
	pod                  *v1.Pod
	typ, reason, message string
}

// New returns a recorder; it starts nothing, and events reported before Run
// are sent when it starts.
func New(cfg Config) *Recorder {
	return &Recorder{cfg: cfg}
}

// Run sends events until ctx ends, then shuts the broadcaster down.
func (r *Recorder) Run(ctx context.Context) error {
	b := record.NewBroadcaster()
	w := b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.cfg.Client.CoreV1().Events("")})
	r.mu.Lock()
	r.recorder = b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "volume-agent", Host: r.cfg.NodeName})
	for _, e := range r.early {
		r.recorder.Event(e.pod, e.typ, e.reason, e.message)
	}
	r.early = nil
	r.mu.Unlock()
	<-ctx.Done()
	r.mu.Lock()
	r.recorder, r.stopped = nil, true
	r.mu.Unlock()
	w.Stop()
	b.Shutdown()
	return nil
}

// SetUpSucceeded reports a volume's first successful set-up, once it is
// recorded in the actual state. The first such set-up after which its pod
// is ready sends the pod's one SuccessfulMountVolume; the others send
// nothing. Two volumes that finish at once both see the pod ready, and
// only the first sends it.
func (r *Recorder) SetUpSucceeded(spec *volume.Spec) {
	if !r.wants(spec) || !r.announce(spec.Pod.UID) {
		return
	}
	r.event(spec.Pod, v1.EventTypeNormal, ReasonSuccessfulMount, "MountVolume.SetUp succeeded for every volume of the pod: "+volumeNames(spec.Pod))
}

// announce reports whether pod uid is ready and its SuccessfulMountVolume
// still to be sent, and records that it is. Readiness is asked under the
// lock ForgetPod takes: a pod removed from the desired state (then
// forgotten) while its last set-up finishes is either not ready here or
// forgotten after it is recorded, so no record outlives its pod.
func (r *Recorder) announce(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.announced[uid] || (r.cfg.Ready != nil && !r.cfg.Ready(uid)) {
		return false
	}
	if r.announced == nil {
		r.announced = map[types.UID]bool{}
	}
	r.announced[uid] = true
	return true
}

// ForgetPod forgets a pod that left the desired state: a pod of the same
// UID that comes back is announced again.
func (r *Recorder) ForgetPod(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.announced, uid)
}

// maxNames bounds the volume names a SuccessfulMountVolume message lists.
const maxNames = 10

// volumeNames lists the volumes of pod, quoted, the first maxNames of them.
func volumeNames(pod *v1.Pod) string {
	vols := pod.Spec.Volumes
	names := make([]string, 0, min(len(vols), maxNames))
	for _, v := range vols[:min(len(vols), maxNames)] {
		names = append(names, strconv.Quote(v.Name))
	}
	if len(vols) > maxNames {
		names = append(names, fmt.Sprintf("and %d more", len(vols)-maxNames))
	}
	return strings.Join(names, ", ")
}

// SetUpFailed reports a failed set-up or refresh.
func (r *Recorder) SetUpFailed(spec *volume.Spec, err error) {
	if r.wants(spec) {
		r.event(spec.Pod, v1.EventTypeWarning, ReasonFailedMount, fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", spec.Volume.Name, err))
	}
}

// SizeLimitExceeded reports a volume whose usage passed its size limit;
// message says by how much.
func (r *Recorder) SizeLimitExceeded(spec *volume.Spec, message string) {
	if r.wants(spec) {
		r.event(spec.Pod, v1.EventTypeWarning, ReasonSizeLimitExceeded, message)
	}
}

// LimitNotEnforced reports a volume whose size limit is not enforced;
// message says why.
func (r *Recorder) LimitNotEnforced(spec *volume.Spec, message string) {
	if r.wants(spec) {
		r.event(spec.Pod, v1.EventTypeWarning, ReasonLimitNotEnforced, message)
	}
}

func (r *Recorder) wants(spec *volume.Spec) bool {
	return spec != nil && spec.Pod != nil && spec.Source == r.cfg.Source
}

// event hands an event to the broadcaster (which never blocks), or keeps it
// until Run starts.
func (r *Recorder) event(pod *v1.Pod, typ, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.recorder != nil:
		r.recorder.Event(pod, typ, reason, message)
	case !r.stopped && len(r.early) < maxEarly:
		r.early = append(r.early, event{pod, typ, reason, message})
	}
}
