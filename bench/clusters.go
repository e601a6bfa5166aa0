package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// manifestDir writes each object to its own file of a manifest directory,
// the atomic way: a hidden temporary file renamed into place.
type manifestDir struct {
	r   *runner
	dir string
}

func (m manifestDir) file(kind, name string) string {
	return filepath.Join(m.dir, kind+"-"+name+".json")
}

func (m manifestDir) write(kind, name string, obj any) {
	b, err := json.Marshal(obj)
	if err != nil {
		m.r.Fatalf("encode %s %s: %v", kind, name, err)
	}
	tmp := filepath.Join(m.dir, "."+kind+"-"+name+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		m.r.Fatalf("write %s: %v", tmp, err)
	}
	if err := os.Rename(tmp, m.file(kind, name)); err != nil {
		m.r.Fatalf("rename %s: %v", tmp, err)
	}
}

func (m manifestDir) putConfigMap(cm *v1.ConfigMap) { m.write("configmap", cm.Name, cm) }
func (m manifestDir) putSecret(s *v1.Secret)        { m.write("secret", s.Name, s) }
func (m manifestDir) putPod(p *v1.Pod)              { m.write("pod", p.Name, p) }
func (m manifestDir) uid(p *v1.Pod) string          { return string(p.UID) }

func (m manifestDir) deletePod(p *v1.Pod) {
	if err := os.Remove(m.file("pod", p.Name)); err != nil {
		m.r.Fatalf("delete pod %s: %v", p.Name, err)
	}
}

// apiServer creates and updates objects through the API.
type apiServer struct {
	r      *runner
	client kubernetes.Interface

	mu   sync.Mutex
	uids map[string]string // pod name → UID the API server gave it
}

func (a *apiServer) ctx() context.Context { return context.Background() }

func (a *apiServer) putConfigMap(cm *v1.ConfigMap) {
	c := a.client.CoreV1().ConfigMaps(cm.Namespace)
	_, err := c.Create(a.ctx(), cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = c.Update(a.ctx(), cm, metav1.UpdateOptions{})
	}
	if err != nil {
		a.r.Fatalf("configMap %s: %v", cm.Name, err)
	}
}

func (a *apiServer) putSecret(s *v1.Secret) {
	if _, err := a.client.CoreV1().Secrets(s.Namespace).Create(a.ctx(), s, metav1.CreateOptions{}); err != nil {
		a.r.Fatalf("secret %s: %v", s.Name, err)
	}
}

func (a *apiServer) putPod(p *v1.Pod) {
	created, err := a.client.CoreV1().Pods(p.Namespace).Create(a.ctx(), p, metav1.CreateOptions{})
	if err != nil {
		a.r.Fatalf("pod %s: %v", p.Name, err)
	}
	a.mu.Lock()
	a.uids[p.Name] = string(created.UID)
	a.mu.Unlock()
}

func (a *apiServer) deletePod(p *v1.Pod) {
	// No kubelet confirms the end of the pod's containers: delete at once.
	zero := int64(0)
	err := a.client.CoreV1().Pods(p.Namespace).Delete(a.ctx(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil {
		a.r.Fatalf("delete pod %s: %v", p.Name, err)
	}
}

func (a *apiServer) uid(p *v1.Pod) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.uids[p.Name]
}
