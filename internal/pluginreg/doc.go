// Package pluginreg serves the kubelet's plugin registration socket for the
// agent's CSI driver, in place of the node-driver-registrar sidecar: the
// kubelet watches its plugin registry directory, finds
// <dir>/<driver>-reg.sock, asks it (GetInfo) for the driver's name, type and
// CSI endpoint, and says (NotifyRegistrationStatus) whether it registered
// the driver. The agent already is a node daemon with the socket directory
// mounted, so it answers those two calls itself.
//
// It owns that one socket: it creates it (0600, so only root, the kubelet,
// connects), removes a stale one a previous run left only after finding
// that nothing answers on it, and removes it when it stops, unless another
// process has replaced it meanwhile. It never touches any other file of the
// directory, and serves nothing but the registration service.
package pluginreg
