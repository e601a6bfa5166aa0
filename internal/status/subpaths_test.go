package status

import (
	"reflect"
	"testing"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/subpath"
)

// TestSubPaths: each subPath a container wants of a volume is listed
// with its prepared path, or why it is not; a refused or failed one fails
// its volume (still set up, with its path) and holds the pod back.
func TestSubPaths(t *testing.T) {
	w := Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}
	v := wanted("v", ed, "1")
	v.SubPaths = []subpath.Want{{Container: "app", Index: 0, Path: "a"}, {Container: "app", Index: 1, Path: "b"}}
	w.Desired.SetPod(dsw.Pod{UID: "p", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{v}})
	a := setUp("p", "v", ed, "1", asw.Mounted)
	a.SubPaths = &subpath.Outcome{Mounts: []subpath.Prepared{{Container: "app", Index: 0, SubPath: "a", Path: "/root/sp/0"}}}
	w.Actual.Set(a)
	p, _ := w.Pod("p")
	want := []SubPath{{Container: "app", Index: 0, SubPath: "a", Path: "/root/sp/0"}, {Container: "app", Index: 1, SubPath: "b"}}
	if got := p.Volumes[0].SubPaths; !reflect.DeepEqual(got, want) {
		t.Errorf("subPaths = %+v, want %+v", got, want)
	}
	if !p.Ready || p.Volumes[0].State != Mounted {
		t.Errorf("pod %+v: want ready and Mounted", p)
	}

	v.SubPaths[1].Path, v.SubPaths[1].Problem = "", `container "app", volumeMount 1 (volume "v"): subPath "../x" must not contain '..'`
	w.Desired.SetPod(dsw.Pod{UID: "p", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{v}})
	p, _ = w.Pod("p")
	got := p.Volumes[0]
	if p.Ready || got.State != Failed || got.Error != v.SubPaths[1].Problem || got.Path != "/host/v" || got.SubPaths[1].Error != v.SubPaths[1].Problem {
		t.Errorf("pod %+v: want not ready, the volume Failed with its path and the refusal", p)
	}
}
