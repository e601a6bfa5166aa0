package subpath

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestExpand(t *testing.T) {
	env := map[string]string{"POD": "web-0", "NS": "prod", "EMPTY": ""}
	for _, tc := range []struct{ expr, want, err string }{
		{expr: "logs/$(POD)", want: "logs/web-0"},
		{expr: "$(NS)/$(POD)", want: "prod/web-0"},
		{expr: "cost$$(POD)", want: "cost$(POD)"},
		{expr: "a$b/$(", want: "a$b/$("},
		{expr: "trailing$", want: "trailing$"},
		{expr: "$(MISSING)/x", err: "missing value for MISSING"},
		{expr: "$(EMPTY)", err: "missing value for EMPTY"},
		{expr: "$(B)$(A)", err: "missing value for A, B"},
	} {
		got, err := Expand(tc.expr, env)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Expand(%q) = %q, %v; want error %q", tc.expr, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", tc.expr, got, err, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	for p, ok := range map[string]bool{
		"a": true, "a/b/c": true, "./a": true, "a//b/": true, "..a/b..": true,
		"/etc": false, "../x": false, "a/../b": false, "a/..": false, "": false, ".": false, "./": false,
		"a\x00b": false, strings.Repeat("x", 256): false, strings.Repeat("x/", 2049): false,
	} {
		if err := Check(p); (err == nil) != ok {
			t.Errorf("Check(%q) = %v, want ok=%v", p, err, ok)
		}
	}
}

func TestWanted(t *testing.T) {
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = "web-0", "prod", "uid-1"
	pod.Spec.NodeName, pod.Spec.ServiceAccountName = "node-a", "sa"
	pod.Labels = map[string]string{"app": "web"}
	pod.Status.PodIP = "10.0.0.7"
	field := func(name, path string) v1.EnvVar {
		return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: path}}}
	}
	pod.Spec.InitContainers = []v1.Container{{Name: "init", VolumeMounts: []v1.VolumeMount{
		{Name: "other", SubPath: "x"},
		{Name: "data", SubPath: "init/dir"},
	}}}
	pod.Spec.Containers = []v1.Container{{Name: "app",
		Env: []v1.EnvVar{field("POD", "metadata.name"), field("NODE", "spec.nodeName"), field("APP", "metadata.labels['app']"),
			field("IP", "status.podIP"), field("SA", "spec.serviceAccountName"), {Name: "DIR", Value: "$(APP)-$(POD)"},
			{Name: "SECRET", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{Key: "k"}}}, field("LABELS", "metadata.labels")},
		VolumeMounts: []v1.VolumeMount{
			{Name: "data"},
			{Name: "data", SubPathExpr: "$(NODE)/$(DIR)/$(IP)/$(SA)"},
			{Name: "data", SubPath: "../etc"},
			{Name: "data", SubPath: "/etc"},
			{Name: "data", SubPathExpr: "$(SECRET)"},
			{Name: "data", SubPathExpr: "$(POD)/../../x"},
			{Name: "data", SubPathExpr: "$(LABELS)"},
		}}}
	pod.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
		Name: "debug", VolumeMounts: []v1.VolumeMount{{Name: "data", SubPath: "eph"}}}}}
	got := Wanted(pod, "data")
	want := []Want{
		{Container: "init", Index: 1, Path: "init/dir"},
		{Container: "app", Index: 1, Path: "node-a/web-web-0/10.0.0.7/sa"},
		{Container: "app", Index: 2, Problem: `container "app", volumeMount 2 (volume "data"): subPath "../etc" must not contain '..'`},
		{Container: "app", Index: 3, Problem: `container "app", volumeMount 3 (volume "data"): subPath "/etc" must not be an absolute path`},
		{Container: "app", Index: 4, Problem: `container "app", volumeMount 4 (volume "data"): subPathExpr "$(SECRET)": missing value for SECRET`},
		{Container: "app", Index: 5, Problem: `container "app", volumeMount 5 (volume "data"): subPath "web-0/../../x" must not contain '..'`},
		{Container: "app", Index: 6, Problem: `container "app", volumeMount 6 (volume "data"): subPathExpr "$(LABELS)": missing value for LABELS`},
	}
	if len(got) != len(want) {
		t.Fatalf("Wanted = %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Wanted[%d] = %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestSatisfied(t *testing.T) {
	wants := []Want{{Container: "c", Index: 0, Path: "a"}, {Container: "c", Index: 1, Problem: "refused"}}
	ok := &Outcome{Mounts: []Prepared{{Container: "c", Index: 0, SubPath: "a", Path: "/t"}}}
	failed := &Outcome{Mounts: []Prepared{{Container: "c", Index: 0, SubPath: "a", Error: "x"}}}
	moved := &Outcome{Mounts: []Prepared{{Container: "c", Index: 0, SubPath: "b", Path: "/t"}}}
	for _, tc := range []struct {
		wants []Want
		o     *Outcome
		want  bool
	}{
		{wants, ok, true}, {wants, failed, false}, {wants, moved, false}, {wants, nil, false},
		{nil, nil, true}, {nil, &Outcome{}, true}, {nil, ok, false}, {wants[1:], &Outcome{}, true},
	} {
		if got := Satisfied(tc.wants, tc.o); got != tc.want {
			t.Errorf("Satisfied(%+v, %+v) = %v, want %v", tc.wants, tc.o, got, tc.want)
		}
	}
}
