package storagecapacity

import (
	"context"
	"errors"
	"slices"
	"testing"

	"go.uber.org/zap"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

// With the CSI driver on, the objects this node's Publisher made earlier
// are deleted; another node's, and the external-provisioner's for this
// node, stay.
func TestWithdrawalDeletesOnlyThisNodesObjects(t *testing.T) {
	mine := []*storagev1.CSIStorageCapacity{}
	for _, c := range []string{"fast", "slow"} {
		p := &Publisher{cfg: Config{Node: "node-a", Namespace: ns}}
		mine = append(mine, p.object(c, 1<<30))
	}
	other := (&Publisher{cfg: Config{Node: "node-b", Namespace: ns}}).object("fast", 1<<30)
	extProv := &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Name: "csisc-x", Namespace: ns, Labels: map[string]string{
		"csi.storage.k8s.io/drivername": provisioner.LocalName, "csi.storage.k8s.io/managed-by": "external-provisioner-node-a"}},
		StorageClassName: "fast"}
	client := fake.NewClientset(mine[0], mine[1], other, extProv)
	w, err := NewWithdrawal(Config{Client: client, Node: "node-a", Namespace: ns, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	list, _ := client.StorageV1().CSIStorageCapacities(ns).List(context.Background(), metav1.ListOptions{})
	var left []string
	for _, o := range list.Items {
		left = append(left, o.Name)
	}
	slices.Sort(left)
	if want := []string{"csisc-x", other.Name}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}

// A failed round is retried until it succeeds.
func TestWithdrawalRetries(t *testing.T) {
	obj := (&Publisher{cfg: Config{Node: "node-a", Namespace: ns}}).object("fast", 1<<30)
	client := fake.NewClientset(obj)
	fails := 1
	client.PrependReactor("delete", "csistoragecapacities", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fails > 0 {
			fails--
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	w, _ := NewWithdrawal(Config{Client: client, Node: "node-a", Namespace: ns, Logger: zap.NewNop()})
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if list, _ := client.StorageV1().CSIStorageCapacities(ns).List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("%d objects left after the retry", len(list.Items))
	}
}
