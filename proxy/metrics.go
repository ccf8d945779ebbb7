package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the gateway's Prometheus series, labelled by project and
// run (the service).
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
	retries  *prometheus.CounterVec
}

// serviceMetrics are one service's children of the series, resolved once.
type serviceMetrics struct {
	labels   []string
	parent   *metrics
	codes    sync.Map // int -> prometheus.Counter
	latency  prometheus.Observer
	inFlight prometheus.Gauge
	retries  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	labels := []string{"project", "run"}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpud_gateway_requests_total",
			Help: "Requests the gateway answered, by service and HTTP status (429: rate limited; 499: the client left)."},
			append(labels, "code")),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gpud_gateway_request_duration_seconds",
			Help:    "Time from a request's arrival to the end of its response (streams included), by service.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}},
			labels),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpud_gateway_in_flight_requests",
			Help: "Requests being served now, open streams and WebSockets included, by service."}, labels),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpud_gateway_retries_total",
			Help: "Requests sent to another replica because the first refused the connection or closed it before answering a request that could be resent, by service."}, labels),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.inFlight, m.retries} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) service(key string) *serviceMetrics {
	project, run, _ := strings.Cut(key, "/")
	l := []string{project, run}
	return &serviceMetrics{labels: l, parent: m, latency: m.latency.WithLabelValues(l...),
		inFlight: m.inFlight.WithLabelValues(l...), retries: m.retries.WithLabelValues(l...)}
}

// forget drops a service's series (the gateway no longer serves it).
func (m *metrics) forget(key string) {
	project, run, _ := strings.Cut(key, "/")
	l := prometheus.Labels{"project": project, "run": run}
	m.requests.DeletePartialMatch(l)
	m.latency.DeletePartialMatch(l)
	m.inFlight.DeletePartialMatch(l)
	m.retries.DeletePartialMatch(l)
}

func (sm *serviceMetrics) observe(code int, d time.Duration) {
	c, ok := sm.codes.Load(code)
	if !ok {
		c, _ = sm.codes.LoadOrStore(code, sm.parent.requests.WithLabelValues(sm.labels[0], sm.labels[1], strconv.Itoa(code)))
	}
	c.(prometheus.Counter).Inc()
	sm.latency.Observe(d.Seconds())
}

// MetricsHandler serves the gateway's metrics in the Prometheus text
// format; nil when Options.Registerer was given (the caller serves them).
func (g *Gateway) MetricsHandler() http.Handler {
	if g.registry == nil {
		return nil
	}
	return promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{})
}
