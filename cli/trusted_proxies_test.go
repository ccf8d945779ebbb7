package cli

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestTrustForwardedForReadsNetworksAndAddresses: --trust-forwarded-for
// takes networks and single addresses, repeated or comma-separated, and
// refuses anything else by name.
func TestTrustForwardedForReadsNetworksAndAddresses(t *testing.T) {
	got, err := parseTrustedProxies([]string{"10.0.0.0/8, 192.168.1.7", "::1", "172.16.5.4/12"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"),
		netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("172.16.0.0/12")}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := parseTrustedProxies([]string{"10.0.0.0/8,lb.example"}); err == nil || !strings.Contains(err.Error(), `"lb.example"`) {
		t.Errorf("a hostname: %v", err)
	}
}
