package downwardapi

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// resourceValue renders a container's resource limit or request divided by
// the divisor and rounded up, as the kubelet does. A limit the container
// does not set is the allocatable amount; a request it does not set is its
// limit when set, else 0. allocatable may be empty when only validating.
func resourceValue(pod *v1.Pod, allocatable v1.ResourceList, ref *v1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName == "" {
		return "", fmt.Errorf("containerName is required in volumes")
	}
	c := findContainer(pod, ref.ContainerName)
	if c == nil {
		return "", fmt.Errorf("container %q is not in the pod", ref.ContainerName)
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") || !supported(v1.ResourceName(name)) {
		return "", fmt.Errorf("resource %q is not supported (limits.* or requests.* of cpu, memory, ephemeral-storage or hugepages-*)", ref.Resource)
	}
	q := quantity(c, allocatable, kind, v1.ResourceName(name))
	return divide(v1.ResourceName(name), q, ref.Divisor)
}

func supported(name v1.ResourceName) bool {
	switch name {
	case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage:
		return true
	}
	return strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}

func findContainer(pod *v1.Pod, name string) *v1.Container {
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func quantity(c *v1.Container, allocatable v1.ResourceList, kind string, name v1.ResourceName) resource.Quantity {
	limit, hasLimit := c.Resources.Limits[name]
	if kind == "requests" {
		if req, ok := c.Resources.Requests[name]; ok {
			return req
		}
		return limit // zero when unset
	}
	if !hasLimit {
		return allocatable[name]
	}
	return limit
}

// divide returns q/divisor rounded up; cpu is divided in millicores.
func divide(name v1.ResourceName, q, divisor resource.Quantity) (string, error) {
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if divisor.Sign() < 0 {
		return "", fmt.Errorf("divisor %s must be positive", divisor.String())
	}
	if name == v1.ResourceCPU {
		return ratio(q.MilliValue(), divisor.MilliValue()), nil
	}
	return ratio(q.Value(), divisor.Value()), nil
}

func ratio(a, b int64) string {
	return strconv.FormatInt(int64(math.Ceil(float64(a)/float64(b))), 10)
}

// MachineCapacity is this machine's cpu, memory and root file system size,
// read once.
var MachineCapacity = sync.OnceValue(machineCapacity)

func machineCapacity() v1.ResourceList {
	list := v1.ResourceList{v1.ResourceCPU: *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI)}
	if mem, err := memTotal(); err == nil {
		list[v1.ResourceMemory] = *resource.NewQuantity(mem, resource.BinarySI)
	}
	var st unix.Statfs_t
	if unix.Statfs("/", &st) == nil {
		list[v1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(st.Blocks)*st.Bsize, resource.BinarySI) //nolint:gosec // G115: a file system's size fits in int64
	}
	return list
}

// memTotal reads MemTotal from /proc/meminfo, in bytes.
func memTotal() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kib, err := strconv.ParseInt(fields[1], 10, 64)
			return kib * 1024, err
		}
	}
	return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
}
