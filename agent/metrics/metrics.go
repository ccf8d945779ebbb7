// Package metrics exposes the agent's host and job readings to Prometheus.
// Readings are taken when Prometheus scrapes (a collector, not a sampling
// loop), so an idle agent that nobody scrapes does no work.
//
// metrics must not import daemon, store, sched, plugins, proxy, nor the
// agent package (it reads the agent through Source).
package metrics

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"gpud.dev/gpud/api"
)

// Source is what the collector reads; *agent.Agent implements it.
type Source interface {
	List() []api.JobStatus
	Metrics(ctx context.Context, id string) (api.JobMetrics, error)
	AcceleratorSamples(ctx context.Context) ([]api.AcceleratorSample, error)
}

// scrapeTimeout bounds one collection.
const scrapeTimeout = 5 * time.Second

var (
	gpuLabels    = []string{"gpu", "uuid"}
	jobLabels    = []string{"job", "run"}
	jobGPULabels = []string{"job", "run", "gpu"}

	descGPUUtil  = prometheus.NewDesc("gpud_gpu_utilization_percent", "GPU utilization, percent.", gpuLabels, nil)
	descGPUMem   = prometheus.NewDesc("gpud_gpu_memory_used_bytes", "GPU memory in use.", gpuLabels, nil)
	descGPUPower = prometheus.NewDesc("gpud_gpu_power_watts", "GPU power draw.", gpuLabels, nil)
	descGPUTemp  = prometheus.NewDesc("gpud_gpu_temperature_celsius", "GPU temperature.", gpuLabels, nil)
	descJobs     = prometheus.NewDesc("gpud_agent_jobs", "Jobs on this agent by state.", []string{"state"}, nil)
	descJobCPU   = prometheus.NewDesc("gpud_job_cpu_seconds_total", "CPU time used by the job.", jobLabels, nil)
	descJobMem   = prometheus.NewDesc("gpud_job_memory_bytes", "Memory used by the job.", jobLabels, nil)
	descJobGUtil = prometheus.NewDesc("gpud_job_gpu_utilization_percent", "Utilization of a GPU assigned to the job.", jobGPULabels, nil)
	descJobGMem  = prometheus.NewDesc("gpud_job_gpu_memory_used_bytes", "Memory in use on a GPU assigned to the job.", jobGPULabels, nil)
	descJobGPow  = prometheus.NewDesc("gpud_job_gpu_power_watts", "Power draw of a GPU assigned to the job.", jobGPULabels, nil)
)

// NewRegistry returns a registry with the agent collector plus the Go
// runtime and process collectors. Each agent gets its own registry (no
// global state).
func NewRegistry(src Source) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{src: src}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

type collector struct{ src Source }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGPUUtil, descGPUMem, descGPUPower, descGPUTemp, descJobs, descJobCPU, descJobMem, descJobGUtil, descJobGMem, descJobGPow} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if samples, err := c.src.AcceleratorSamples(ctx); err == nil {
		for _, s := range samples {
			l := []string{strconv.Itoa(s.Index), s.UUID}
			ch <- prometheus.MustNewConstMetric(descGPUUtil, prometheus.GaugeValue, float64(s.Utilization), l...)
			ch <- prometheus.MustNewConstMetric(descGPUMem, prometheus.GaugeValue, float64(s.MemoryUsed), l...)
			ch <- prometheus.MustNewConstMetric(descGPUPower, prometheus.GaugeValue, s.PowerW, l...)
			ch <- prometheus.MustNewConstMetric(descGPUTemp, prometheus.GaugeValue, float64(s.TemperatureC), l...)
		}
	}
	byState := map[api.JobState]int{}
	for _, st := range c.src.List() {
		byState[st.State]++
		if st.State != api.JobRunning && st.State != api.JobTerminating {
			continue
		}
		m, err := c.src.Metrics(ctx, st.ID)
		if err != nil {
			continue // the job ended between List and Metrics
		}
		ch <- prometheus.MustNewConstMetric(descJobCPU, prometheus.CounterValue, m.CPUSeconds, st.ID, st.RunName)
		ch <- prometheus.MustNewConstMetric(descJobMem, prometheus.GaugeValue, float64(m.MemoryBytes), st.ID, st.RunName)
		for _, g := range m.GPUs {
			l := []string{st.ID, st.RunName, strconv.Itoa(g.Index)}
			ch <- prometheus.MustNewConstMetric(descJobGUtil, prometheus.GaugeValue, float64(g.Utilization), l...)
			ch <- prometheus.MustNewConstMetric(descJobGMem, prometheus.GaugeValue, float64(g.MemoryUsed), l...)
			ch <- prometheus.MustNewConstMetric(descJobGPow, prometheus.GaugeValue, g.PowerW, l...)
		}
	}
	for _, s := range []api.JobState{api.JobPulling, api.JobRunning, api.JobTerminating, api.JobDone, api.JobFailed, api.JobTerminated} {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(byState[s]), string(s))
	}
}
