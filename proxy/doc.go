// Package proxy is the service gateway: it routes a request for
// https://<run>.<domain>/... or /proxy/services/<project>/<run>/... to a
// ready replica of that service (least outstanding requests, keep-alive
// pools, a request sent again only when it cannot run twice: it never
// reached a replica, or it is idempotent and no answer began), checks
// the service's auth, applies its rate limits, streams SSE and WebSocket
// without buffering, serves the OpenAI-compatible model routes, counts
// request rates for autoscaling, exports Prometheus metrics, and
// terminates TLS with certificates that certmagic obtains over ACME for
// hostnames the server knows. Its listeners are served by Front, an
// HTTP/1.1 server of its own for a strict subset of requests that hands
// everything else to net/http (front.go).
//
// It owns routing, balancing, TLS and the per-request counters. It knows
// services only through the Resolver that the server (daemon) or a
// standalone gateway (`gpud gateway`) gives it: the store, the scheduler
// and the agents stay on the other side of that interface.
//
// proxy may import api (the shared configuration and wire types) and
// libraries; it must not import daemon, store, sched, agent, plugins or
// cli.
package proxy
