// Package plugintest is test support for volume plugins: Conformance, the
// suite every plugin in the default registry must pass against the real
// file system, and small fakes of what plugins depend on (Objects, Tokens)
// plus helpers to inspect mounts and directory trees.
//
// It is imported by tests only: the agent must never import it. It mounts
// and unmounts only below the test's own temporary directories (as root: the
// bind mount the suite nests into a volume, and cleanups that unmount what a
// failed test left behind).
package plugintest
