// Package docs holds no code: its tests check the operator documentation
// at the module root against the code, so that neither can drift from the
// other. METRICS.md is checked against the registry the agent builds;
// TROUBLESHOOTING.md against the messages the Go sources produce. It must
// never be imported.
package docs
