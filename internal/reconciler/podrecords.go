package reconciler

import (
	"fmt"

	"github.com/volume-agent/volume-agent/internal/podrecord"
)

// records is where the pods' records are (package podrecord).
func (r *Reconciler) records() podrecord.Store {
	return podrecord.Store{Dir: r.cfg.Root.PodRecordsDir()}
}

// recordPod records the source of a's pod beside its directory, unless the
// actual state says it is recorded already, then notes the directory in
// the actual state. Set-ups of several volumes of one pod may write the
// same record at once: each write is a rename of a file of its own.
func (r *Reconciler) recordPod(a action) error {
	d, ok := r.cfg.Actual.PodDir(a.pod)
	if !ok || d.Source != a.podSource || d.Namespace != a.podNamespace || d.Name != a.podName {
		rec := podrecord.Record{UID: a.pod, Namespace: a.podNamespace, Name: a.podName, Source: a.podSource}
		if err := r.records().Write(rec); err != nil {
			return fmt.Errorf("before making the directory of pod %s/%s: %w", a.podNamespace, a.podName, err)
		}
	}
	r.cfg.Actual.NotePod(a.pod, a.podNamespace, a.podName, a.podSource)
	return nil
}
