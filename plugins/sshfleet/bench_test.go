package sshfleet

import (
	"context"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkProvisionThreeHosts measures the time from the start of
// provisioning to three agents answering through SSH (fresh hosts: the
// binary is uploaded to each). Containers are started outside the timer.
//
//	go test -run '^$' -bench ProvisionThreeHosts -benchtime 3x ./plugins/sshfleet/
func BenchmarkProvisionThreeHosts(b *testing.B) {
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		f := newFleet(b, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		b.StartTimer()
		start := time.Now()
		var wg sync.WaitGroup
		hosts := make([]*Host, 3)
		for i := range 3 {
			wg.Go(func() {
				h, err := Provision(ctx, f.target(i), f.options())
				if err != nil {
					b.Error(err)
					return
				}
				hosts[i] = h
			})
		}
		wg.Wait()
		total += time.Since(start)
		b.StopTimer()
		for _, h := range hosts {
			if h != nil {
				h.Close()
			}
		}
		cancel()
		b.StartTimer()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-to-3-ready")
}

// BenchmarkMemoryPerConnectedHost measures the server's heap per host held
// connected: an SSH connection, its keepalive monitor and one kept-alive
// agent API connection through it. The hosts are several connections to
// one sshd container (the server side costs the same either way).
//
//	go test -run '^$' -bench MemoryPerConnectedHost -benchtime 1x ./plugins/sshfleet/
func BenchmarkMemoryPerConnectedHost(b *testing.B) {
	const n = 20
	f := newFleet(b, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first, err := Provision(ctx, f.target(0), f.options())
	if err != nil {
		b.Fatal(err)
	}
	defer first.Close()
	var heap, goroutines, perPing float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		hosts := make([]*Host, 0, n)
		mctx, stop := context.WithCancel(ctx)
		for range n {
			h := &Host{Target: first.Target, Dir: first.Dir, Socket: first.Socket, Token: first.Token, dialer: f.dialer, log: first.log}
			h.transport = first.transport.Clone()
			h.transport.DialContext = h.dialAgent
			if err := h.Reconnect(ctx); err != nil {
				b.Fatal(err)
			}
			go h.Monitor(mctx, HealthConfig{}, func(Health, error) {})
			hosts = append(hosts, h)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap += float64(after.HeapAlloc-before.HeapAlloc) / n / 1024
		goroutines += float64(runtime.NumGoroutine()-g0) / n
		// CPU of this process per keepalive round over all hosts.
		const rounds = 50
		cpu0 := cpuTime()
		for range rounds {
			for _, h := range hosts {
				if err := h.Ping(ctx, time.Second); err != nil {
					b.Fatal(err)
				}
			}
		}
		perPing += (cpuTime() - cpu0).Seconds() / (rounds * n)
		stop()
		for _, h := range hosts {
			h.Close()
		}
	}
	runs := float64(b.N)
	b.ReportMetric(heap/runs, "KiB-heap/host")
	b.ReportMetric(goroutines/runs, "goroutines/host")
	b.ReportMetric(perPing/runs*1e6, "µs-CPU/keepalive")
	b.ReportMetric(100*perPing/runs/DefaultKeepaliveInterval.Seconds(), "%core/host")
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
