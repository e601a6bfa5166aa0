package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/volume-agent/volume-agent/internal/usage"
)

// volumeStatsLabels: a claim's volume has namespace and
// persistentvolumeclaim, the label set of the kubelet's
// kubelet_volume_stats_*, its pod and volume empty; an emptyDir has
// namespace, pod and volume, its persistentvolumeclaim empty. Prometheus
// stores an empty label as no label at all.
var volumeStatsLabels = []string{"namespace", "persistentvolumeclaim", "pod", "volume"}

var volumeStatsDescs = []struct {
	desc  *prometheus.Desc
	value func(usage.Measurement) uint64
}{
	{prometheus.NewDesc("volume_agent_volume_stats_capacity_bytes",
		"Capacity in bytes of the file system the volume is on (its own, when it is its own file system; the sizeLimit of an emptyDir whose file system does not enforce it), as kubelet_volume_stats_capacity_bytes.",
		volumeStatsLabels, nil), func(m usage.Measurement) uint64 { return m.CapacityBytes }},
	{prometheus.NewDesc("volume_agent_volume_stats_available_bytes",
		"Bytes still available to unprivileged users on the file system the volume is on, as kubelet_volume_stats_available_bytes.",
		volumeStatsLabels, nil), func(m usage.Measurement) uint64 { return m.AvailableBytes }},
	{prometheus.NewDesc("volume_agent_volume_stats_used_bytes",
		"Bytes the volume uses: its file system's used blocks (statfs), or st_blocks*512 of every entry of its directory (walk), as kubelet_volume_stats_used_bytes.",
		volumeStatsLabels, nil), func(m usage.Measurement) uint64 { return m.UsedBytes }},
	{prometheus.NewDesc("volume_agent_volume_stats_inodes",
		"Inodes of the file system the volume is on, as kubelet_volume_stats_inodes.",
		volumeStatsLabels, nil), func(m usage.Measurement) uint64 { return m.Inodes }},
	{prometheus.NewDesc("volume_agent_volume_stats_inodes_free",
		"Free inodes of the file system the volume is on, as kubelet_volume_stats_inodes_free.",
		volumeStatsLabels, nil), func(m usage.Measurement) uint64 { return m.InodesFree }},
	{prometheus.NewDesc("volume_agent_volume_stats_inodes_used",
		"Inodes the volume uses (a hard-linked file once), as kubelet_volume_stats_inodes_used.",
		volumeStatsLabels, nil), func(m usage.Measurement) uint64 { return m.InodesUsed }},
	{prometheus.NewDesc("volume_agent_volume_limit_not_enforced",
		"1 when the size of a volume the agent limits with a btrfs qgroup is not enforced at its latest measurement (limitNotEnforced in /v1/pods says why), else 0.",
		volumeStatsLabels, nil), func(m usage.Measurement) uint64 {
		if m.NotEnforced != "" {
			return 1
		}
		return 0
	}},
}

// sizeLimitDesc is the sizeLimit of a volume that has one (a disk
// emptyDir): its capacity in the stats too, unless a btrfs qgroup
// enforces it (the qgroup's limit, with room for metadata, is then).
var sizeLimitDesc = prometheus.NewDesc("volume_agent_volume_size_limit_bytes",
	"The sizeLimit in bytes of an emptyDir volume on disk that has one; absent for other volumes.",
	volumeStatsLabels, nil)

// VolumeStatsLister gives the latest measurement of every volume measured.
type VolumeStatsLister interface {
	Stats() []usage.Stat
}

// VolumeStats reports each measured volume's capacity, available and used
// bytes and inodes, from the latest measurements at every scrape: a
// scrape measures nothing itself.
func VolumeStats(l VolumeStatsLister) Option {
	return func() prometheus.Collector { return volumeStatsCollector{l} }
}

type volumeStatsCollector struct{ lister VolumeStatsLister }

func (c volumeStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range volumeStatsDescs {
		ch <- d.desc
	}
	ch <- sizeLimitDesc
}

// Collect sends the metrics of every measured volume. A claim used by two
// pods of the node is one series: the first measured of its volumes.
func (c volumeStatsCollector) Collect(ch chan<- prometheus.Metric) {
	type claim struct{ namespace, name string }
	seen := map[claim]bool{}
	for _, s := range c.lister.Stats() {
		labels := []string{s.Namespace, s.Claim, s.Pod, s.Volume}
		if s.Claim != "" {
			k := claim{s.Namespace, s.Claim}
			if seen[k] {
				continue
			}
			seen[k] = true
			labels = []string{s.Namespace, s.Claim, "", ""}
		}
		for _, d := range volumeStatsDescs {
			ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, float64(d.value(s.Measurement)), labels...)
		}
		if s.SizeLimit > 0 {
			ch <- prometheus.MustNewConstMetric(sizeLimitDesc, prometheus.GaugeValue, float64(s.SizeLimit), labels...)
		}
	}
}
