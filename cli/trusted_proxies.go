package cli

import (
	"fmt"
	"net/netip"
	"strings"
)

// parseTrustedProxies reads --trust-forwarded-for: networks (10.0.0.0/8)
// or single addresses (10.0.0.5, a /32 or /128), each flag value
// possibly a comma-separated list.
func parseTrustedProxies(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		for s := range strings.SplitSeq(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p.Masked())
				continue
			}
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("--trust-forwarded-for %q: want a network like 10.0.0.0/8 or an address like 10.0.0.5", s)
			}
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return out, nil
}
