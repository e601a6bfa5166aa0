package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/test/controlplane"
)

// SnapshotControllerArgs are the snapshot-controller's flags besides the
// kubeconfig and the metrics address. Leader election is off: one runs per
// test control plane. The CSIVolumeGroupSnapshot feature (GA, on by
// default) is turned off because the driver has no group snapshots and
// InstallSnapshotCRDs leaves their CRDs out; with it on and the CRDs
// missing, the controller retries for --retry-crd-interval-max (30 s) at
// every start before going on without them.
var SnapshotControllerArgs = []string{
	"--leader-election=false",
	"--feature-gates=CSIVolumeGroupSnapshot=false",
}

// StartSnapshotController runs the snapshot-controller on the host against
// cp, with cp's admin kubeconfig, and returns once it serves its metrics:
// it has found the snapshot CRDs (install them first with
// InstallSnapshotCRDs; without them it exits) and is starting its
// informers. The test's cleanup kills it.
func StartSnapshotController(t testing.TB, cp *controlplane.ControlPlane, extraArgs ...string) *Process {
	t.Helper()
	p, err := startSnapshotController(t, cp, extraArgs...)
	if err != nil {
		t.Fatalf("csi: %v", err)
	}
	return p
}

func startSnapshotController(t testing.TB, cp *controlplane.ControlPlane, extraArgs ...string) (*Process, error) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := append([]string{"--kubeconfig=" + cp.AdminKubeconfig(), "--http-endpoint=" + addr}, SnapshotControllerArgs...)
	p := Run(t, SnapshotController, nil, append(args, extraArgs...)...)
	ctx, cancel := context.WithTimeout(context.Background(), snapshotControllerStartTimeout)
	defer cancel()
	if err := waitServing(ctx, p, "http://"+addr+"/metrics"); err != nil {
		return nil, fmt.Errorf("snapshot-controller: %w\n%s", err, p.Tail(20))
	}
	return p, nil
}

// snapshotControllerStartTimeout bounds the wait for the snapshot-controller
// to serve its metrics. It starts in well under a second once the CRDs are
// there; without them it gives up after --retry-crd-interval-max (30 s by
// default) and exits, which ends the wait early.
const snapshotControllerStartTimeout = time.Minute

// waitServing polls url until it answers 200, the process exits or ctx ends.
func waitServing(ctx context.Context, p *Process, url string) error {
	client := &http.Client{Timeout: 5 * time.Second}
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		select {
		case <-p.Exited():
			return p.ExitErr()
		case <-ctx.Done():
			return fmt.Errorf("not serving %s: %w", url, errors.Join(ctx.Err(), err))
		case <-ticker.C:
		}
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
