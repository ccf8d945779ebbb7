package netguard

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// The addresses a project admin's backend may not reach, and some it may
// (a cluster on the network, private ranges included).
func TestWhy(t *testing.T) {
	own := []netip.Addr{netip.MustParseAddr("192.0.2.7")}
	for addr, want := range map[string]string{
		"127.0.0.1": "loopback", "127.8.9.1": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"0.0.0.0": "unspecified", "::": "unspecified", "0.1.2.3": "unspecified",
		"169.254.169.254": "link-local", "fe80::1": "link-local", "fd00:ec2::254": "metadata", "100.100.100.200": "metadata",
		"224.0.0.1": "multicast", "ff02::1": "multicast", "192.0.2.7": "own host",
		"10.0.0.1": "", "192.168.1.10": "", "172.16.5.4": "", "203.0.113.9": "", "2001:db8::1": "",
	} {
		got := Why(netip.MustParseAddr(addr), own)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
}

// A dialer with Control refuses a name that resolves to loopback at the
// connection (what DNS rebinding would exploit after a check by name).
func TestControlRefusesAtTheConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	d := net.Dialer{Control: Control}
	_, err = d.DialContext(context.Background(), "tcp", "localhost:"+port)
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("dial localhost through the guard: %v, want a loopback refusal", err)
	}
}
