package controlplane

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// RootCAConfigMap is the ConfigMap that kube-controller-manager's
// root-ca-certificate-publisher-controller puts into every namespace; key
// "ca.crt" holds the cluster CA.
const RootCAConfigMap = "kube-root-ca.crt"

// nsReadyTimeout bounds the wait for a new namespace's default
// ServiceAccount and kube-root-ca.crt ConfigMap.
const nsReadyTimeout = 30 * time.Second

// CreateNamespace creates namespace name and returns once it holds the
// default ServiceAccount (which ServiceAccount admission needs before it
// admits a pod) and the kube-root-ca.crt ConfigMap (which kube-api-access
// volumes project). With a kube-controller-manager its controllers create
// both; without one, CreateNamespace creates them itself, standing in for
// the serviceaccount and root-ca-certificate-publisher controllers.
func (c *ControlPlane) CreateNamespace(t testing.TB, name string) {
	t.Helper()
	ctx := t.Context()
	if err := c.createNamespace(ctx, name); err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, nsReadyTimeout, true, func(ctx context.Context) (bool, error) {
		return c.namespaceReady(ctx, name), nil
	})
	if err != nil {
		t.Fatalf("controlplane: namespace %q has no default ServiceAccount or %s ConfigMap: %v", name, RootCAConfigMap, err)
	}
}

func (c *ControlPlane) createNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %q: %w", name, err)
	}
	if c.opts.ControllerManager {
		return nil
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: RootCAConfigMap},
		Data:       map[string]string{"ca.crt": string(c.layout.pki.caPEM)},
	}
	if _, err := c.client.CoreV1().ConfigMaps(name).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create configMap %s/%s: %w", name, RootCAConfigMap, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := c.client.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create serviceAccount %s/default: %w", name, err)
	}
	return nil
}

// namespaceReady reports whether both objects exist. Errors count as not
// ready: the poll's timeout reports them.
func (c *ControlPlane) namespaceReady(ctx context.Context, name string) bool {
	if _, err := c.client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{}); err != nil {
		return false
	}
	_, err := c.client.CoreV1().ConfigMaps(name).Get(ctx, RootCAConfigMap, metav1.GetOptions{})
	return err == nil
}
