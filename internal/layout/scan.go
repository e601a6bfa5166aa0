package layout

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/types"
)

// Found is a volume directory found on disk.
type Found struct {
	PodUID types.UID
	Plugin string // unescaped plugin name
	Volume string
	Dir    string
}

// Scan lists the pod directories and the volume directories below them.
// Entries that are not directories (or are symlinks) are skipped: the agent
// made none of them.
func (r Root) Scan() (pods []types.UID, volumes []Found, err error) {
	podNames, err := readDirs(r.PodsDir())
	if err != nil {
		return nil, nil, err
	}
	for _, p := range podNames {
		uid := types.UID(p)
		pods = append(pods, uid)
		plugins, err := readDirs(r.VolumesDir(uid))
		if err != nil {
			return nil, nil, err
		}
		for _, plugin := range plugins {
			vols, err := readDirs(r.PluginDir(uid, UnescapePluginName(plugin)))
			if err != nil {
				return nil, nil, err
			}
			for _, v := range vols {
				name := UnescapePluginName(plugin)
				volumes = append(volumes, Found{PodUID: uid, Plugin: name, Volume: v, Dir: r.VolumeDir(uid, name, v)})
			}
		}
	}
	return pods, volumes, nil
}

// readDirs lists the names of real directories in dir; a missing dir is empty.
func readDirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
