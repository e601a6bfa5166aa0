package storagecapacity

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ns = "volume-agent"

func class(name, prov string) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: prov}
}

// room is a Room whose figure the test sets; a negative one is an error.
type room struct{ n atomic.Int64 }

func (r *room) get(context.Context) (int64, error) {
	if n := r.n.Load(); n >= 0 {
		return n, nil
	}
	return 0, errors.New("statfs: input/output error")
}

// start runs a Publisher for node-a over objs. The fake clientset stands
// in for the API server; test/e2e's TestCapacityScheduling runs it against
// a real one and the real scheduler.
func start(t *testing.T, r *room, objs ...runtime.Object) (*fake.Clientset, *Publisher) {
	t.Helper()
	client := fake.NewClientset(objs...)
	p, err := New(Config{Client: client, Driver: provisioner.LocalName, Node: "node-a", Namespace: ns, Room: r.get, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return client, p
}

// published lists the capacity, by class, of the objects in ns.
func published(t *testing.T, c *fake.Clientset) map[string]string {
	t.Helper()
	list, err := c.StorageV1().CSIStorageCapacities(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range list.Items {
		out[o.StorageClassName] = o.Capacity.String() + "/" + o.MaximumVolumeSize.String()
	}
	return out
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wantPublished(t *testing.T, c *fake.Clientset, want map[string]string) {
	t.Helper()
	eventually(t, fmt.Sprintf("published %v", want), func() (bool, string) {
		got := published(t, c)
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got)
	})
}

func TestPublishesRoomPerClass(t *testing.T) {
	r := &room{}
	r.n.Store(10 << 30)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: types.UID("node-uid")}}
	c, p := start(t, r, node, class("fast", provisioner.LocalName), class("old", provisioner.LegacyLocalName),
		class("nfs", provisioner.NFSSubdirName), class("other", "example.com/other"))
	wantPublished(t, c, map[string]string{"fast": "10Gi/10Gi", "old": "10Gi/10Gi"})

	o, err := c.StorageV1().CSIStorageCapacities(ns).Get(context.Background(), objectName("node-a", "fast"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sel := o.NodeTopology.MatchLabels; len(sel) != 1 || sel[v1.LabelHostname] != "node-a" {
		t.Errorf("nodeTopology = %+v", o.NodeTopology)
	}
	if refs := o.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != "node-uid" {
		t.Errorf("ownerReferences = %+v, want the Node", refs)
	}
	d, err := c.StorageV1().CSIDrivers().Get(context.Background(), provisioner.LocalName, metav1.GetOptions{})
	if err != nil || d.Spec.StorageCapacity == nil || !*d.Spec.StorageCapacity {
		t.Errorf("CSIDriver %s: %+v, %v; want it made with storageCapacity true", provisioner.LocalName, d, err)
	}

	// Less than 1 % less: not worth an update.
	r.n.Store(10<<30 - 50<<20)
	p.Changed()
	time.Sleep(200 * time.Millisecond)
	wantPublished(t, c, map[string]string{"fast": "10Gi/10Gi", "old": "10Gi/10Gi"})
	// 1 GiB was provisioned.
	r.n.Store(9 << 30)
	p.Changed()
	wantPublished(t, c, map[string]string{"fast": "9Gi/9Gi", "old": "9Gi/9Gi"})
	// Unknown is not zero: the objects keep the last figure.
	r.n.Store(-1)
	p.Changed()
	time.Sleep(200 * time.Millisecond)
	wantPublished(t, c, map[string]string{"fast": "9Gi/9Gi", "old": "9Gi/9Gi"})
	r.n.Store(0)
	p.Changed()
	wantPublished(t, c, map[string]string{"fast": "0/0", "old": "0/0"})

	// A class deleted takes its object along; a new one gets one; an
	// object deleted by someone else comes back.
	if err := c.StorageV1().StorageClasses().Delete(context.Background(), "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StorageV1().StorageClasses().Create(context.Background(), class("new", provisioner.LocalName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantPublished(t, c, map[string]string{"fast": "0/0", "new": "0/0"})
	if err := c.StorageV1().CSIStorageCapacities(ns).Delete(context.Background(), objectName("node-a", "fast"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantPublished(t, c, map[string]string{"fast": "0/0", "new": "0/0"})
}

// An operator's CSIDriver is left as it is.
func TestLeavesAnExistingCSIDriver(t *testing.T) {
	r := &room{}
	mine := Driver(provisioner.LocalName)
	mine.Spec.StorageCapacity = nil
	c, _ := start(t, r, mine, class("fast", provisioner.LocalName))
	wantPublished(t, c, map[string]string{"fast": "0/0"})
	d, err := c.StorageV1().CSIDrivers().Get(context.Background(), provisioner.LocalName, metav1.GetOptions{})
	if err != nil || d.Spec.StorageCapacity != nil {
		t.Errorf("CSIDriver: %+v, %v; want it unchanged", d, err)
	}
}

func TestNames(t *testing.T) {
	long := string(make([]byte, 253))
	for _, n := range []string{objectName("node-a", "fast"), objectName(long, long)} {
		if len(n) > 63 {
			t.Errorf("object name %q: longer than 63", n)
		}
	}
	if objectName("a", "bc") == objectName("ab", "c") {
		t.Error("object names of different nodes and classes collide")
	}
	if k := nodeKey(long); len(k) != 16 {
		t.Errorf("node key %q", k)
	}
}

// A namespace where the identity may not list the objects makes the
// publisher wait, not fail: the agent stops cleanly.
func TestRefusedListIsNoError(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "csistoragecapacities", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(storagev1.Resource("csistoragecapacities"), "", errors.New("RBAC"))
	})
	p, err := New(Config{Client: client, Driver: provisioner.LocalName, Node: "node-a", Namespace: ns, Room: (&room{}).get, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := p.Run(ctx); err != nil {
		t.Errorf("Run: %v, want nil once ctx ends", err)
	}
}
