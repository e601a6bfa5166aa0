package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/usage"
)

// stats is a VolumeStatsLister the test sets.
type stats []usage.Stat

func (s *stats) Stats() []usage.Stat { return *s }

func TestVolumeStats(t *testing.T) {
	m := usage.Measurement{CapacityBytes: 8 << 20, AvailableBytes: 3 << 20, UsedBytes: 5 << 20, Inodes: 100, InodesFree: 90, InodesUsed: 10, Method: usage.MethodStatfs}
	s := &stats{
		{Target: usage.Target{Key: dsw.Key{PodUID: "a", Volume: "cache"}, Namespace: "ns", Pod: "web", Volume: "cache"}, Measurement: m},
		{Target: usage.Target{Key: dsw.Key{PodUID: "a", Volume: "pv-1"}, Namespace: "ns", Pod: "web", Volume: "data", Claim: "data"}, Measurement: m},
		// The same claim in a second pod: one series.
		{Target: usage.Target{Key: dsw.Key{PodUID: "b", Volume: "pv-1"}, Namespace: "ns", Pod: "db", Volume: "data", Claim: "data"}, Measurement: m},
	}
	reg := prometheus.NewPedanticRegistry()
	New(reg, func() map[string]int { return nil }, VolumeStats(s))
	want := `
# HELP volume_agent_volume_stats_used_bytes Bytes the volume uses: its file system's used blocks (statfs), or st_blocks*512 of every entry of its directory (walk), as kubelet_volume_stats_used_bytes.
# TYPE volume_agent_volume_stats_used_bytes gauge
volume_agent_volume_stats_used_bytes{namespace="ns",persistentvolumeclaim="",pod="web",volume="cache"} 5.24288e+06
volume_agent_volume_stats_used_bytes{namespace="ns",persistentvolumeclaim="data",pod="",volume=""} 5.24288e+06
# HELP volume_agent_volume_stats_capacity_bytes Capacity in bytes of the file system the volume is on (its own, when it is its own file system; the sizeLimit of an emptyDir whose file system does not enforce it), as kubelet_volume_stats_capacity_bytes.
# TYPE volume_agent_volume_stats_capacity_bytes gauge
volume_agent_volume_stats_capacity_bytes{namespace="ns",persistentvolumeclaim="",pod="web",volume="cache"} 8.388608e+06
volume_agent_volume_stats_capacity_bytes{namespace="ns",persistentvolumeclaim="data",pod="",volume=""} 8.388608e+06
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "volume_agent_volume_stats_used_bytes", "volume_agent_volume_stats_capacity_bytes"); err != nil {
		t.Fatal(err)
	}
	got := gather(t, reg)
	for name, v := range map[string]float64{
		"volume_agent_volume_stats_available_bytes{namespace=ns,persistentvolumeclaim=data,pod=,volume=}": 3 << 20,
		"volume_agent_volume_stats_inodes{namespace=ns,persistentvolumeclaim=,pod=web,volume=cache}":      100,
		"volume_agent_volume_stats_inodes_free{namespace=ns,persistentvolumeclaim=,pod=web,volume=cache}": 90,
		"volume_agent_volume_stats_inodes_used{namespace=ns,persistentvolumeclaim=data,pod=,volume=}":     10,
	} {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
	if n := testutil.CollectAndCount(volumeStatsCollector{s}); n != 14 {
		t.Errorf("%d series, want 12 (6 metrics of 2 volumes)", n)
	}
	// Read at every scrape: a volume gone is gone.
	*s = (*s)[:1]
	if n := testutil.CollectAndCount(volumeStatsCollector{s}); n != 7 {
		t.Errorf("%d series after a volume went, want 7", n)
	}
}

// An emptyDir with a sizeLimit has it as a metric of its own, with the
// labels of its other metrics; other volumes have none.
func TestVolumeSizeLimit(t *testing.T) {
	m := usage.Measurement{CapacityBytes: 10 << 20, UsedBytes: 12 << 20, SizeLimitBytes: 10 << 20, Method: usage.MethodWalk}
	s := &stats{
		{Target: usage.Target{Key: dsw.Key{PodUID: "a", Volume: "cache"}, Namespace: "ns", Pod: "web", Volume: "cache", SizeLimit: 10 << 20}, Measurement: m},
		{Target: usage.Target{Key: dsw.Key{PodUID: "a", Volume: "pv-1"}, Namespace: "ns", Pod: "web", Volume: "data", Claim: "data"}, Measurement: m},
	}
	reg := prometheus.NewPedanticRegistry()
	New(reg, func() map[string]int { return nil }, VolumeStats(s))
	want := `
# HELP volume_agent_volume_size_limit_bytes The sizeLimit in bytes of an emptyDir volume on disk that has one; absent for other volumes.
# TYPE volume_agent_volume_size_limit_bytes gauge
volume_agent_volume_size_limit_bytes{namespace="ns",persistentvolumeclaim="",pod="web",volume="cache"} 1.048576e+07
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "volume_agent_volume_size_limit_bytes"); err != nil {
		t.Fatal(err)
	}
}
