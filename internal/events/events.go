// Package events reports volume set-up outcomes as Kubernetes Events on the
// pod, with the kubelet's reasons: SuccessfulMountVolume and FailedMount.
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

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// Kubelet event reasons.
const (
	ReasonSuccessfulMount = "SuccessfulMountVolume"
	ReasonFailedMount     = "FailedMount"
)

// Config configures a Recorder.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	// Source is the pod source whose pods get events (the API server's).
	Source string
}

// Recorder sends events. Create with New; Run owns the broadcaster.
type Recorder struct {
	cfg         Config
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
}

// New returns a recorder; nothing is sent until Run.
func New(cfg Config) *Recorder {
	b := record.NewBroadcaster()
	return &Recorder{
		cfg:         cfg,
		broadcaster: b,
		recorder:    b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "volume-agent", Host: cfg.NodeName}),
	}
}

// Run sends events until ctx ends, then shuts the broadcaster down.
func (r *Recorder) Run(ctx context.Context) error {
	w := r.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.cfg.Client.CoreV1().Events("")})
	<-ctx.Done()
	w.Stop()
	r.broadcaster.Shutdown()
	return nil
}

// SetUpSucceeded reports a volume's first successful set-up.
func (r *Recorder) SetUpSucceeded(spec *volume.Spec) {
	if r.wants(spec) {
		r.recorder.Eventf(spec.Pod, v1.EventTypeNormal, ReasonSuccessfulMount, "MountVolume.SetUp succeeded for volume %q", spec.Volume.Name)
	}
}

// SetUpFailed reports a failed set-up or refresh.
func (r *Recorder) SetUpFailed(spec *volume.Spec, err error) {
	if r.wants(spec) {
		r.recorder.Eventf(spec.Pod, v1.EventTypeWarning, ReasonFailedMount, "MountVolume.SetUp failed for volume %q : %v", spec.Volume.Name, err)
	}
}

func (r *Recorder) wants(spec *volume.Spec) bool {
	return spec != nil && spec.Pod != nil && spec.Source == r.cfg.Source
}
