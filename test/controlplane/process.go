package controlplane

import "github.com/volume-agent/volume-agent/test/internal/proc"

// startProcess starts one component, its output appended to logPath, which
// survives restarts of the same component.
func startProcess(name, path string, args []string, logPath string) (*proc.Process, error) {
	return proc.Start(name, path, logPath, nil, args)
}
