package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	sigsyaml "sigs.k8s.io/yaml"

	"gpud.dev/gpud/internal/netguard"
)

// A backend's plugin connects, from the server's host, wherever its
// configuration says: a project admin who names a Kubernetes API server
// at 127.0.0.1, at the link-local cloud metadata address 169.254.169.254
// or at the server's own addresses would make the server reach its own
// loopback services, its cloud identity or its own API on their behalf
// (server-side request forgery), and Check's errors would carry what
// answered. checkBackendAddresses refuses such a configuration from a
// caller who is not a global admin (global admins and the server's
// configuration file may name any address: docs/security.md). The
// addresses are internal/netguard's; the Kubernetes plugin of such a
// backend also dials through netguard.Control (deny_server_network), so
// a name that resolves elsewhere after this check is refused too.

// addrChecker checks the hosts of URLs, resolving names once each.
type addrChecker struct {
	ctx context.Context
	own []netip.Addr
}

// checkURL refuses a URL whose host is, or resolves to, a forbidden
// address. A name that does not resolve now is left to the backend's
// Check (which will fail to connect).
func (c addrChecker) checkURL(field, raw string) error {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return nil
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		got, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil
		}
		addrs = got
	}
	for _, a := range addrs {
		if why := netguard.Why(a, c.own); why != "" {
			via := ""
			if ua := a.Unmap(); ua.String() != host && a.String() != host {
				via = " (" + host + " resolves to " + ua.String() + ")"
			}
			return fmt.Errorf("%s: %s is %s%s, which only a global admin may name: a project's backend must reach its cluster or cloud over the network, not the server's own host or network", field, raw, why, via)
		}
	}
	return nil
}

// kubeconfigFields reads a kubeconfig the way client-go does (YAML to
// JSON, the last of duplicate keys winning) into plain values, so that
// every address in it is walked whatever its key's case.
func kubeconfigFields(data string) (any, error) {
	js, err := sigsyaml.YAMLToJSON([]byte(data))
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(js, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// checkBackendAddresses refuses, for a caller who is not a global admin,
// a backend configuration naming an address on the server's own host or
// network: a kubeconfig_data cluster's server or proxy-url, or any other
// field that is a URL (an external plugin's endpoint).
func checkBackendAddresses(ctx context.Context, fields map[string]any) error {
	c := addrChecker{ctx: ctx, own: netguard.OwnAddrs()}
	var walk func(path string, v any) error
	walk = func(path string, v any) error {
		switch v := v.(type) {
		case string:
			if path == "kubeconfig_data" {
				kc, err := kubeconfigFields(v)
				if err != nil {
					return fmt.Errorf("%s: not a kubeconfig: %v", path, err)
				}
				return walk(path+":", kc)
			}
			if strings.Contains(v, "://") {
				return c.checkURL(path, v)
			}
			// A kubeconfig's server may omit the scheme (client-go
			// then speaks https).
			if key := strings.ToLower(path[strings.LastIndexByte(path, '.')+1:]); strings.HasPrefix(path, "kubeconfig_data:") && (key == "server" || key == "proxy-url") && v != "" {
				return c.checkURL(path, "https://"+v)
			}
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(v)) {
				sub := path + "." + k
				switch {
				case path == "":
					sub = k
				case strings.HasSuffix(path, ":"):
					sub = path + " " + k // inside kubeconfig_data
				}
				if err := walk(sub, v[k]); err != nil {
					return err
				}
			}
		case []any:
			for i, x := range v {
				if err := walk(fmt.Sprintf("%s[%d]", path, i), x); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk("", fields)
}
