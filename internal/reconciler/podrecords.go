package reconciler

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/podrecord"
)

// records is where the pods' records are (package podrecord).
func (r *Reconciler) records() podrecord.Store {
	return podrecord.Store{Dir: r.cfg.Root.PodRecordsDir()}
}

// recordPod records the source of a's pod beside its directory, unless the
// actual state says it is recorded already, then notes the directory in
// the actual state, then makes the pod's directories: record, NotePod,
// directories, in that order (package podrecord). The set-ups of a pod's
// volumes, which start together, take turns here, so that the first writes
// the record and makes the directories once and the others find them.
func (r *Reconciler) recordPod(a action) error {
	unlock := r.recording.lock(a.pod)
	defer unlock()
	d, ok := r.cfg.Actual.PodDir(a.pod)
	recorded := ok && d.Source == a.podSource && d.Namespace == a.podNamespace && d.Name == a.podName
	if !recorded {
		rec := podrecord.Record{UID: a.pod, Namespace: a.podNamespace, Name: a.podName, Source: a.podSource}
		if r.beforeRecord != nil {
			r.beforeRecord(a.pod)
		}
		if err := r.records().Write(rec); err != nil {
			return fmt.Errorf("before making the directory of pod %s/%s: %w", a.podNamespace, a.podName, err)
		}
	}
	r.cfg.Actual.NotePod(a.pod, a.podNamespace, a.podName, a.podSource)
	if !ok {
		r.makePodDirs(a.pod)
	}
	return nil
}

// makePodDirs makes, when the pod's directory was not known, the
// directories its volumes' set-ups would each make with MkdirAll: the pod
// directory, volumes/ and the plugin directory of each of its volumes
// (not those of volumeMode Block, published elsewhere). One mkdir each;
// an existing one is fine. It is best effort: a set-up makes what is
// missing and reports what it cannot make.
func (r *Reconciler) makePodDirs(uid types.UID) {
	if err := unix.Mkdir(r.cfg.Root.PodDir(uid), 0o750); err == unix.ENOENT {
		_ = os.MkdirAll(r.cfg.Root.PodDir(uid), 0o750) // the first pod of a new root
	}
	_ = unix.Mkdir(r.cfg.Root.VolumesDir(uid), 0o750)
	pod, ok := r.cfg.Desired.Pod(uid)
	if !ok {
		return
	}
	made := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.Plugin == "" || v.Block || made[v.Plugin] {
			continue
		}
		made[v.Plugin] = true
		_ = unix.Mkdir(r.cfg.Root.PluginDir(uid, v.Plugin), 0o750)
	}
}
