package claim

import (
	"net"
	"os"
	"strings"
)

// HostInfo identifies the machine in the registry.
type HostInfo struct {
	Hostname  string
	Address   string
	MachineID string
}

// LocalHostInfo returns this machine's host name, a non-loopback address
// (empty if there is none) and machine id (from /etc/machine-id or
// /var/lib/dbus/machine-id, else "host:" followed by the host name).
func LocalHostInfo() HostInfo {
	var h HostInfo
	h.Hostname, _ = os.Hostname()
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
				h.Address = ipn.IP.String()
				break
			}
		}
	}
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			h.MachineID = strings.TrimSpace(string(b))
			break
		}
	}
	if h.MachineID == "" && h.Hostname != "" {
		// The registry's conditions compare machine ids: never leave it
		// empty while something tells machines apart.
		h.MachineID = "host:" + h.Hostname
	}
	return h
}
