// Package plugintest is test support for volume plugins: Conformance, the
// suite every plugin in the default registry must pass against the real
// file system, and small fakes of what plugins depend on (Objects, Tokens)
// plus helpers to inspect mounts and directory trees.
//
// It is imported by tests only: the agent must never import it. Nothing in
// it mounts except through the Mounter a Case supplies, and the cleanups it
// registers only unmount what lies below the test's own temporary
// directories.
package plugintest
