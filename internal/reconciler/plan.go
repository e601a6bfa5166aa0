package reconciler

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/subpath"
)

// opKind is what an action does.
type opKind string

const (
	opSetUp    opKind = "setup"    // set up a volume that is not (certainly) set up
	opRefresh  opKind = "refresh"  // bring a set-up volume's content up to date
	opTearDown opKind = "teardown" // tear down a volume no longer wanted
	opCleanup  opKind = "cleanup"  // remove an empty, unwanted pod directory
	opCheck    opKind = "check"    // tell a dead mounted volume from a live one
)

// action is one step towards the desired state.
type action struct {
	kind    opKind
	pod     types.UID
	volume  string     // empty for opCleanup
	plugin  string     // empty for opCleanup
	desired dsw.Volume // for opSetUp and opRefresh
	actual  asw.Volume // for opRefresh and opTearDown
	// podNamespace and podName name the pod in logs: from the desired
	// state, or from the actual state once the pod has left it (empty
	// for a pod found on disk at start and never seen since).
	podNamespace, podName string
	// podSource is the source of the pod a set-up is for, recorded
	// beside the pod's directory before the set-up makes it.
	podSource string
}

// snapshot is what plan looks at.
type snapshot struct {
	desired []dsw.Pod
	actual  []asw.Volume
	podDirs []asw.PodDir
	// populated: every source has delivered its complete state since start;
	// until then nothing found on disk at start is torn down.
	populated bool
	// removed are the pods whose removal counts (dsw.World.Removed): only
	// their volumes and directories go.
	removed map[types.UID]bool
}

// plan returns the actions that move the actual state towards the desired
// one: first teardowns and cleanups of what is no longer wanted, then
// set-ups and refreshes. It is a pure function of its snapshot.
func plan(s snapshot) []action {
	have := map[dsw.Key]asw.Volume{}
	for _, a := range s.actual {
		have[a.Key()] = a
	}
	wanted := desiredPods(s.desired)
	actions := teardowns(s, wanted)
	actions = append(actions, cleanups(s, wanted)...)
	named(actions, s.podDirs)
	return append(actions, setups(s.desired, have)...)
}

// named gives the teardowns and cleanups of pods gone from the desired
// state the names the actual state keeps of their pods.
func named(actions []action, dirs []asw.PodDir) {
	byUID := make(map[types.UID]asw.PodDir, len(dirs))
	for _, d := range dirs {
		byUID[d.UID] = d
	}
	for i := range actions {
		d := byUID[actions[i].pod]
		actions[i].podNamespace, actions[i].podName = d.Namespace, d.Name
	}
}

func desiredPods(pods []dsw.Pod) map[types.UID]bool {
	wanted := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		wanted[p.UID] = true
	}
	return wanted
}

// teardowns: a volume is torn down only when its pod is no longer desired
// at all and its removal counts. A volume of a desired pod is kept whatever
// the pod's spec now says about it — gone from the spec, another plugin, a
// problem — because a running pod's volumes cannot change and its data may
// be in use: the spec seen now may be a half-written manifest, and after a
// restart the agent cannot know what the spec said when the volume was set
// up. A pod that is not desired is not known to be gone until its source
// says so (s.removed): a pod found on disk at start that an empty manifest
// directory does not list is held. Volumes found on disk at start also wait
// until every source has synced.
func teardowns(s snapshot, wantedPods map[types.UID]bool) []action {
	var out []action
	for _, a := range s.actual {
		if wantedPods[a.PodUID] || !s.removed[a.PodUID] || (a.Reconstructed && !s.populated) {
			continue
		}
		out = append(out, action{kind: opTearDown, pod: a.PodUID, volume: a.Name, plugin: a.Plugin, actual: a})
	}
	return out
}

// cleanups: a pod directory is removed once its pod's removal counts and
// none of its volumes is set up any more.
func cleanups(s snapshot, wantedPods map[types.UID]bool) []action {
	busy := map[types.UID]bool{}
	for _, a := range s.actual {
		busy[a.PodUID] = true
	}
	var out []action
	for _, d := range s.podDirs {
		if wantedPods[d.UID] || busy[d.UID] || !s.removed[d.UID] || (d.Reconstructed && !s.populated) {
			continue
		}
		out = append(out, action{kind: opCleanup, pod: d.UID})
	}
	return out
}

// setups: a desired volume without problems is set up when it is missing or
// uncertain, and refreshed when its content version moved on.
func setups(pods []dsw.Pod, have map[dsw.Key]asw.Volume) []action {
	var out []action
	for _, p := range pods {
		for _, d := range p.Volumes {
			if d.Problem != "" || d.Plugin == "" || d.Waiting != "" {
				continue
			}
			a, ok := have[dsw.Key{PodUID: p.UID, Volume: d.Name}]
			act := action{pod: p.UID, volume: d.Name, plugin: d.Plugin, desired: d, actual: a, podNamespace: p.Namespace, podName: p.Name, podSource: p.Source}
			switch {
			case ok && (a.Plugin != d.Plugin || a.Block != d.Block || a.ReadOnlyChanged(d.ReadOnly)):
				continue // the set-up volume is kept until the pod goes
			case !ok || a.State == asw.Uncertain:
				act.kind = opSetUp
			case a.Version != d.Version:
				act.kind = opRefresh
			case a.SubPaths != nil && !subpath.Satisfied(d.SubPaths, a.SubPaths):
				// The containers' subPath mounts changed, or one
				// failed: prepared again (after a backoff).
				act.kind = opSetUp
			default:
				continue
			}
			out = append(out, act)
		}
	}
	return out
}
