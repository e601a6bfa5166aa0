package populator

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// cachedPod is what a pass derived from one pod, and from what. A later
// pass computes the pod again only when the pod object, the node object,
// its source or the set of its set-up volumes changed, and within the pod
// only the volumes that read an object that changed since, or that are
// volatile. Pods and objects are shared, read-only snapshots: a source
// that changes one hands out a new one.
type cachedPod struct {
	pod    *v1.Pod
	node   *v1.Node
	source string
	// setUp is the actual state's Generation of the pod that keepSetUpVolumes saw.
	setUp   uint64
	volumes []cachedVolume // one per entry of pod.Spec.Volumes
	// round is the last pass that saw the pod listed by its source.
	round int64
}

// cachedVolume is one volume as desiredVolume described it, before the
// steps that look at the whole pod, with the lookups it made.
type cachedVolume struct {
	desired  dsw.Volume
	reads    []read
	volatile bool
}

// podInputs is what a pod's desired state is computed from.
type podInputs struct {
	src     source.Source
	objects volume.Objects // src.Objects(), once per pass
	pod     *v1.Pod
	node    *v1.Node
	// volatile is set when the pod's volatile volumes may have changed
	// since the last pass: they are computed again.
	volatile bool
}

func (c *cachedPod) sameInputs(in podInputs) bool {
	return c.pod == in.pod && c.node == in.node && c.source == in.src.Name()
}

// syncPod brings the desired state of in.pod up to date, computing again
// only what changed since prev (nil: nothing is known, or the pass is
// full). It returns what it derived.
func (p *Populator) syncPod(in podInputs, prev *cachedPod, round int64) *cachedPod {
	var vols []cachedVolume
	if prev == nil || !prev.sameInputs(in) {
		vols = p.volumesOf(in)
	} else {
		var changed bool
		vols, changed = p.refreshVolumes(in, prev.volumes)
		if !changed && prev.setUp == p.setUpGeneration(in.pod.UID) {
			prev.round = round
			return prev
		}
	}
	setUp, generation := p.setUpVolumes(in.pod.UID)
	p.cfg.Desired.SetPod(p.desiredPod(in, vols, setUp))
	return &cachedPod{pod: in.pod, node: in.node, source: in.src.Name(), setUp: generation, volumes: vols, round: round}
}

// volumesOf computes every volume of in.pod.
func (p *Populator) volumesOf(in podInputs) []cachedVolume {
	podProblem := podProblem(in.pod)
	uses := map[string]int{}
	for _, v := range in.pod.Spec.Volumes {
		uses[v.Name]++
	}
	out := make([]cachedVolume, len(in.pod.Spec.Volumes))
	for i := range in.pod.Spec.Volumes {
		v := &in.pod.Spec.Volumes[i]
		if uses[v.Name] > 1 {
			// Like API validation, reject every volume of that name: which
			// one is meant cannot be known.
			out[i].desired = dsw.Volume{Name: v.Name, Problem: fmt.Sprintf("spec.volumes[%d].name %q is used more than once", i, v.Name)}
			continue
		}
		out[i] = p.computeVolume(in, v, podProblem)
	}
	return out
}

// refreshVolumes computes again the volumes of prev that read an object
// that changed since, and the volatile ones when in.volatile; it reports whether any came
// out different. A volume whose objects changed counts as different even
// when what the desired state shows of it is the same: its new Spec (a
// PersistentVolume's new source, say) is for the next SetUp.
func (p *Populator) refreshVolumes(in podInputs, prev []cachedVolume) ([]cachedVolume, bool) {
	var out []cachedVolume // a copy, made at the first difference
	for i, c := range prev {
		same := readsUnchanged(c.reads, in.objects)
		if same && (!c.volatile || !in.volatile) {
			continue
		}
		next := p.computeVolume(in, &in.pod.Spec.Volumes[i], podProblem(in.pod))
		if same && next.desired.Equal(c.desired) {
			continue // volatile, and as it was
		}
		if out == nil {
			out = slices.Clone(prev)
		}
		out[i] = next
	}
	if out == nil {
		return prev, false
	}
	return out, true
}

func readsUnchanged(reads []read, objs volume.Objects) bool {
	for _, r := range reads {
		if !r.unchanged(objs) {
			return false
		}
	}
	return true
}

// computeVolume describes one volume, noting the objects it reads.
func (p *Populator) computeVolume(in podInputs, v *v1.Volume, podProblem string) cachedVolume {
	rec := &recorder{objects: in.objects}
	spec := &volume.Spec{Pod: in.pod, Volume: v, Objects: rec, Node: in.node, Source: in.src.Name()}
	d := p.desiredVolume(spec, podProblem)
	if d.Spec != nil {
		// The plugin reads the objects again at SetUp, from the source.
		d.Spec.Objects = in.objects
	}
	return cachedVolume{desired: d, reads: rec.reads, volatile: volatile(v)}
}

// podProblem says why none of the pod's volumes can be set up, or "".
func podProblem(pod *v1.Pod) string {
	if err := layout.ValidName(string(pod.UID)); err != nil {
		return fmt.Sprintf("pod metadata.uid: %v", err)
	}
	return ""
}

// volatile reports whether a volume's content version depends on state no
// source holds: a service account token, minted and refreshed by the
// agent itself. Such a volume is computed at every pass, or with
// Config.VolatileByPod at the passes after NotifyPod named its pod.
func volatile(v *v1.Volume) bool {
	if v.Projected == nil {
		return false
	}
	for _, s := range v.Projected.Sources {
		if s.ServiceAccountToken != nil {
			return true
		}
	}
	return false
}

// setUpGeneration returns the actual state's Generation of the pod.
func (p *Populator) setUpGeneration(uid types.UID) uint64 {
	if p.cfg.Actual == nil {
		return 0
	}
	return p.cfg.Actual.Generation(uid)
}

// setUpVolumes returns the set-up volumes of the pod by name, and the
// Generation they are of.
func (p *Populator) setUpVolumes(uid types.UID) (map[string]asw.Volume, uint64) {
	if p.cfg.Actual == nil {
		return nil, 0
	}
	vols, generation := p.cfg.Actual.PodVolumes(uid)
	out := make(map[string]asw.Volume, len(vols))
	for _, v := range vols {
		out[v.Name] = v
	}
	return out, generation
}
