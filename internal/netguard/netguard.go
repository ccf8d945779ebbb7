// Package netguard says which addresses a backend configured by a project
// admin (not a global admin) may not reach from the server's host: its
// loopback, unspecified, link-local (the cloud metadata service at
// 169.254.169.254), multicast and cloud metadata addresses, and the host's
// own interface addresses. The server checks a configuration's URLs with
// Why when the backend is added; a plugin dials through Control, so a
// name that resolves elsewhere later (DNS rebinding) is refused at the
// connection too. It imports only the standard library.
package netguard

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
)

// metadataAddrs are cloud metadata services outside the link-local range
// (AWS's IPv6 one, Alibaba Cloud's).
var metadataAddrs = []netip.Addr{netip.MustParseAddr("fd00:ec2::254"), netip.MustParseAddr("100.100.100.200")}

// thisNetwork is 0.0.0.0/8, which Linux connects to this host.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// Why says why a may not be reached ("" when it may); own are the
// host's own addresses (OwnAddrs).
func Why(a netip.Addr, own []netip.Addr) string {
	a = a.Unmap().WithZone("")
	switch {
	case a.IsLoopback():
		return "a loopback address (the server's own host)"
	case a.IsUnspecified() || (a.Is4() && thisNetwork.Contains(a)):
		return "an unspecified address (the server's own host)"
	case a.IsLinkLocalUnicast():
		return "a link-local address (where clouds serve their metadata and credentials, 169.254.169.254)"
	case a.IsMulticast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast():
		return "a multicast address"
	case slices.Contains(metadataAddrs, a):
		return "a cloud's metadata address"
	case slices.Contains(own, a):
		return "an address of the server's own host"
	}
	return ""
}

// OwnAddrs are the addresses of this host's interfaces.
func OwnAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}

// Control is a net.Dialer's Control: it refuses a connection to an
// address Why names, after the name was resolved, just before connecting.
func Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("netguard: %s: %w", address, err)
	}
	if why := Why(ap.Addr(), OwnAddrs()); why != "" {
		return fmt.Errorf("connection to %s refused: %s, which a project admin's backend may not reach (only a global admin's)", address, why)
	}
	return nil
}
