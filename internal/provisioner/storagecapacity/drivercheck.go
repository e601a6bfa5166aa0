package storagecapacity

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Mismatch is a field of the CSIDriver object whose value is not the one
// the agent's CSI driver needs.
type Mismatch struct {
	Field, Found, Needed string
}

func (m Mismatch) String() string {
	return fmt.Sprintf("%s is %s, the driver needs %s", m.Field, m.Found, m.Needed)
}

// Mismatches compares a CSIDriver object with Driver(d.Name), the object
// the agent's CSI driver needs, field by field; an unset field counts as
// the API server's default for it (attachRequired true, podInfoOnMount
// false, fsGroupPolicy ReadWriteOnceWithFSType, the volume lifecycle mode
// Persistent, the others false), which is what the kubelet goes by.
func Mismatches(d *storagev1.CSIDriver) []Mismatch {
	want := Driver(d.Name).Spec
	var out []Mismatch
	for _, f := range []struct {
		name        string
		got, needed *bool
		dflt        bool
	}{
		{"attachRequired", d.Spec.AttachRequired, want.AttachRequired, true},
		{"podInfoOnMount", d.Spec.PodInfoOnMount, want.PodInfoOnMount, false},
		{"storageCapacity", d.Spec.StorageCapacity, want.StorageCapacity, false},
		{"seLinuxMount", d.Spec.SELinuxMount, want.SELinuxMount, false},
		{"requiresRepublish", d.Spec.RequiresRepublish, want.RequiresRepublish, false},
	} {
		if got := orDefault(f.got, f.dflt); got != *f.needed {
			out = append(out, Mismatch{f.name, fmt.Sprint(got), fmt.Sprint(*f.needed)})
		}
	}
	policy := storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
	if d.Spec.FSGroupPolicy != nil {
		policy = *d.Spec.FSGroupPolicy
	}
	if policy != *want.FSGroupPolicy {
		out = append(out, Mismatch{"fsGroupPolicy", string(policy), string(*want.FSGroupPolicy)})
	}
	modes := d.Spec.VolumeLifecycleModes
	if len(modes) == 0 {
		modes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	}
	if !slices.Contains(modes, storagev1.VolumeLifecyclePersistent) {
		out = append(out, Mismatch{"volumeLifecycleModes", fmt.Sprint(modes), "to include " + string(storagev1.VolumeLifecyclePersistent)})
	}
	return out
}

func orDefault(b *bool, dflt bool) bool {
	if b == nil {
		return dflt
	}
	return *b
}

// DriverCheckConfig configures a DriverCheck.
type DriverCheckConfig struct {
	// Client reads the CSIDriver object (get on csidrivers).
	Client kubernetes.Interface
	// Driver names the CSIDriver object, the CSI driver's name.
	Driver string
	Logger *zap.Logger
	// Period is how often the object is read again once the API server
	// answered, so that the problem clears once the object is fixed;
	// default 5 minutes. Retry is how soon after the API server did not
	// answer; default 10 s.
	Period, Retry time.Duration
}

// DriverCheck reads, when the agent serves the CSI driver, the CSIDriver
// object of its name and says, in a warning logged when the answer changes
// and in Problem, when the object is missing or differs from what the
// driver needs. A CSIDriver's attachRequired and volumeLifecycleModes
// cannot be changed, so an object left by an older deployment with other
// values is not fixed by kubectl apply or helm upgrade, and the kubelet
// goes by it: with attachRequired true it waits for a VolumeAttachment no
// one makes, with podInfoOnMount false or another fsGroupPolicy it
// publishes volumes without what the driver counts on. The check never
// stops the agent: volumes already published, and those of the agent's
// own provisioner, do not depend on it.
type DriverCheck struct {
	cfg DriverCheckConfig
	log *zap.Logger

	mu      sync.Mutex
	problem string // guarded by mu
}

// NewDriverCheck checks cfg: Client, Driver and Logger are required.
func NewDriverCheck(cfg DriverCheckConfig) (*DriverCheck, error) {
	if cfg.Client == nil || cfg.Driver == "" || cfg.Logger == nil {
		return nil, errors.New("storagecapacity: Client, Driver and Logger are required")
	}
	if cfg.Period <= 0 {
		cfg.Period = 5 * time.Minute
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 10 * time.Second
	}
	return &DriverCheck{cfg: cfg, log: cfg.Logger.Named("csidriver-check")}, nil
}

// Problem says what is wrong with the CSIDriver object and what to do,
// or returns "" when nothing is (or nothing is known yet).
func (c *DriverCheck) Problem() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.problem
}

// Run reads the object at once, then every Period (every Retry while the
// API server does not answer), until ctx ends.
func (c *DriverCheck) Run(ctx context.Context) error {
	for {
		wait := c.cfg.Period
		if !c.Check(ctx) {
			wait = c.cfg.Retry
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Check reads the object once and sets Problem. It reports false when the
// API server did not answer (Problem is then left as it was).
func (c *DriverCheck) Check(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := c.cfg.Client.StorageV1().CSIDrivers().Get(ctx, c.cfg.Driver, metav1.GetOptions{})
	var problem string
	switch {
	case apierrors.IsNotFound(err):
		problem = fmt.Sprintf("CSIDriver %s does not exist: the kubelet then attaches and mounts this driver's volumes with the API's defaults "+
			"(attachRequired true: pods wait for a VolumeAttachment no one makes); apply it (deploy/daemonset.yaml, or helm upgrade)", c.cfg.Driver)
	case apierrors.IsForbidden(err):
		c.log.Warn("the CSIDriver object cannot be read: it is not checked (grant get on csidrivers, as deploy/daemonset.yaml does)",
			zap.String("name", c.cfg.Driver), zap.Error(err))
		return true
	case err != nil:
		c.log.Debug("the CSIDriver object cannot be read yet", zap.String("name", c.cfg.Driver), zap.Error(err))
		return false
	default:
		problem = describe(d, Mismatches(d))
	}
	c.set(problem, apierrors.IsNotFound(err))
	return true
}

// describe says what of d differs and what to do, or "" when nothing does.
func describe(d *storagev1.CSIDriver, ms []Mismatch) string {
	if len(ms) == 0 {
		return ""
	}
	var fields []string
	for _, m := range ms {
		fields = append(fields, m.String())
	}
	return fmt.Sprintf("CSIDriver %s is not what the CSI driver needs: %s. Its spec may be left by an older deployment (kubectl apply and "+
		"helm upgrade cannot change attachRequired or volumeLifecycleModes): delete it (kubectl delete csidriver %s; volumes and PVs are "+
		"not touched) and apply it again (deploy/daemonset.yaml, or helm upgrade)", d.Name, strings.Join(fields, "; "), d.Name)
}

// set records problem, and logs it when it changed.
func (c *DriverCheck) set(problem string, missing bool) {
	c.mu.Lock()
	changed := problem != c.problem
	c.problem = problem
	c.mu.Unlock()
	switch {
	case !changed:
	case missing:
		c.log.Warn("the CSIDriver object does not exist: apply it", zap.String("name", c.cfg.Driver), zap.String("problem", problem))
	case problem != "":
		c.log.Warn("the CSIDriver object is not what the CSI driver needs: delete it and apply it again",
			zap.String("name", c.cfg.Driver), zap.String("problem", problem))
	default:
		c.log.Info("the CSIDriver object is now what the CSI driver needs", zap.String("name", c.cfg.Driver))
	}
}
