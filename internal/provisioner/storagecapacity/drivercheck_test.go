package storagecapacity

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

// TestMismatches: the object the chart and deploy/ ship matches; each
// field set otherwise is named with the value found and the one needed;
// an unset field counts as the API server's default.
func TestMismatches(t *testing.T) {
	edited := func(f func(*storagev1.CSIDriverSpec)) *storagev1.CSIDriver {
		d := Driver(provisioner.LocalName)
		f(&d.Spec)
		return d
	}
	for _, tc := range []struct {
		name string
		d    *storagev1.CSIDriver
		want []string
	}{
		{"as shipped", Driver(provisioner.LocalName), nil},
		{"podInfoOnMount false", edited(func(s *storagev1.CSIDriverSpec) { s.PodInfoOnMount = ptr.To(false) }),
			[]string{"podInfoOnMount is false, the driver needs true"}},
		{"another fsGroupPolicy", edited(func(s *storagev1.CSIDriverSpec) { s.FSGroupPolicy = ptr.To(storagev1.NoneFSGroupPolicy) }),
			[]string{"fsGroupPolicy is None, the driver needs File"}},
		{"attach required, ephemeral only", edited(func(s *storagev1.CSIDriverSpec) {
			s.AttachRequired = ptr.To(true)
			s.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral}
		}), []string{"attachRequired is true, the driver needs false", "volumeLifecycleModes is [Ephemeral], the driver needs to include Persistent"}},
		{"every field unset: the API's defaults", &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: provisioner.LocalName}}, []string{
			"attachRequired is true, the driver needs false",
			"podInfoOnMount is false, the driver needs true",
			"storageCapacity is false, the driver needs true",
			"fsGroupPolicy is ReadWriteOnceWithFSType, the driver needs File",
		}},
	} {
		var got []string
		for _, m := range Mismatches(tc.d) {
			got = append(got, m.String())
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: mismatches\n%s\nwant\n%s", tc.name, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

// TestDriverCheck: an old CSIDriver object (podInfoOnMount false,
// fsGroupPolicy ReadWriteOnceWithFSType) is reported once, at warn, and by
// Problem, naming each field, the value found and needed, and what to do;
// once the object is replaced the problem clears, said at info.
func TestDriverCheck(t *testing.T) {
	old := Driver(provisioner.LocalName)
	old.Spec.PodInfoOnMount = ptr.To(false)
	old.Spec.FSGroupPolicy = ptr.To(storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy)
	client := fake.NewClientset(old)
	core, logs := observer.New(zapcore.DebugLevel)
	c := newDriverCheck(t, client, zap.New(core))

	for range 2 {
		if !c.Check(t.Context()) {
			t.Fatal("Check: the API server answered, want true")
		}
	}
	problem := c.Problem()
	for _, want := range []string{"CSIDriver local.volume-agent.io", "podInfoOnMount is false, the driver needs true",
		"fsGroupPolicy is ReadWriteOnceWithFSType, the driver needs File", "kubectl delete csidriver local.volume-agent.io", "apply it again"} {
		if !strings.Contains(problem, want) {
			t.Errorf("Problem() = %q, want it to say %q", problem, want)
		}
	}
	warns := logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warns) != 1 || warns[0].ContextMap()["problem"] != problem {
		t.Errorf("warnings logged %v, want one with the problem (not again while it stays)", warns)
	}

	if err := client.StorageV1().CSIDrivers().Delete(t.Context(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.StorageV1().CSIDrivers().Create(t.Context(), Driver(provisioner.LocalName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.Check(t.Context())
	if p := c.Problem(); p != "" {
		t.Errorf("after the object was replaced Problem() = %q, want none", p)
	}
	if n := logs.FilterMessage("the CSIDriver object is now what the CSI driver needs").Len(); n != 1 {
		t.Errorf("the fix logged %d times, want once", n)
	}
}

// TestDriverCheckMissingAndUnreadable: a missing object is a problem
// (the kubelet would attach with the API's defaults); an API server that
// does not answer leaves the problem as it was and asks to retry; a
// refused read is logged and not a problem (nothing is known).
func TestDriverCheckMissingAndUnreadable(t *testing.T) {
	client := fake.NewClientset()
	c := newDriverCheck(t, client, zap.NewNop())
	if !c.Check(t.Context()) || !strings.Contains(c.Problem(), "CSIDriver local.volume-agent.io does not exist") {
		t.Errorf("missing object: Problem() = %q", c.Problem())
	}
	missing := c.Problem()
	client.PrependReactor("get", "csidrivers", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if c.Check(t.Context()) || c.Problem() != missing {
		t.Errorf("API server down: Check true or Problem() changed to %q", c.Problem())
	}

	refused := fake.NewClientset()
	refused.PrependReactor("get", "csidrivers", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "storage.k8s.io", Resource: "csidrivers"}, provisioner.LocalName, errors.New("rbac"))
	})
	core, logs := observer.New(zapcore.WarnLevel)
	c = newDriverCheck(t, refused, zap.New(core))
	if !c.Check(t.Context()) || c.Problem() != "" || logs.Len() != 1 {
		t.Errorf("forbidden: Problem() = %q, %d warnings; want none and one", c.Problem(), logs.Len())
	}
}

// TestDriverCheckRunRetriesAndStops: Run reads again after Retry while the
// API server does not answer, finds the problem once it does, and returns
// when its context ends.
func TestDriverCheckRunRetriesAndStops(t *testing.T) {
	client := fake.NewClientset()
	calls := 0
	client.PrependReactor("get", "csidrivers", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		if calls < 3 {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	c, err := NewDriverCheck(DriverCheckConfig{Client: client, Driver: provisioner.LocalName, Logger: zap.NewNop(), Retry: time.Millisecond, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); c.Problem() == "" && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.Problem(), "does not exist") {
		t.Errorf("after retries Problem() = %q, want the missing object", c.Problem())
	}
}

func newDriverCheck(t *testing.T, client *fake.Clientset, log *zap.Logger) *DriverCheck {
	t.Helper()
	c, err := NewDriverCheck(DriverCheckConfig{Client: client, Driver: provisioner.LocalName, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
