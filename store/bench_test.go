package store

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// Benchmarks run with fsync on, on a real file under b.TempDir() (on this
// machine /tmp is on the root disk, not tmpfs). Results: docs/BENCHMARKS.md.

// cpuTime is the user + system CPU time of this process so far: on a
// shared machine it says what a benchmark costs where wall time cannot.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchJob(i int) Record {
	return Record{Kind: KindJob, ID: fmt.Sprintf("job-%08d", i), Project: "main", Run: fmt.Sprintf("run-%d", i/8),
		Queue: "research", Status: JobSubmitted, Spec: []byte(`{"image":"nvcr.io/nvidia/pytorch:24.05","gpu":"H100:8","commands":["torchrun train.py"]}`)}
}

// runWriters resets the timer and calls write(i) for i in 1..b.N, spread
// over writers goroutines; it returns the wall and CPU time they took.
// A failed write ends its goroutine and fails the benchmark.
func runWriters(b *testing.B, writers int, write func(i int) error) (wall, cpu time.Duration) {
	b.Helper()
	var next atomic.Int64
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > b.N {
					return
				}
				if err := write(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), cpuTime() - cpu0
}

// BenchmarkApply measures durable mutations/s through the group-commit
// writer with 1, 16 and 256 concurrent writers, one Put per Apply.
func BenchmarkApply(b *testing.B) {
	for _, writers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s := openAt(b, filepath.Join(b.TempDir(), "state.db"), Options{})
			before := s.Stats().Commits
			el, cpu := runWriters(b, writers, func(i int) error {
				_, err := s.Apply(context.Background(), Put(benchJob(i)))
				return err
			})
			b.StopTimer()
			commits := s.Stats().Commits - before
			b.ReportMetric(float64(b.N)/el.Seconds(), "mutations/s")
			b.ReportMetric(2*float64(commits)/float64(b.N), "fsyncs/op")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkBoltBatch is the same load through bbolt's own DB.Batch, for
// comparison (one goroutine per writer, default MaxBatchDelay 10 ms).
func BenchmarkBoltBatch(b *testing.B) {
	for _, writers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			db, err := bbolt.Open(filepath.Join(b.TempDir(), "bolt.db"), 0o600, &bbolt.Options{NoFreelistSync: true, FreelistType: bbolt.FreelistMapType})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("jobs")); return err })
			el, cpu := runWriters(b, writers, func(i int) error {
				r := benchJob(i)
				enc, _ := encodeRecord(&r, nil)
				return db.Batch(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("jobs")).Put([]byte(r.ID), enc) })
			})
			b.ReportMetric(float64(b.N)/el.Seconds(), "mutations/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkPlan10000Binds commits a scheduler plan of 10,000 job bindings in
// one Apply (one transaction).
func BenchmarkPlan10000Binds(b *testing.B) {
	s := openAt(b, filepath.Join(b.TempDir(), "state.db"), Options{})
	jobs := make([]Record, 10000)
	for i := range jobs {
		jobs[i] = benchJob(i)
	}
	mustApply(b, s, putAll(jobs)...)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		plan := make([]Mutation, len(jobs))
		for i, j := range jobs {
			j.Status, j.Instance = JobProvisioning, fmt.Sprintf("host-%d-%d", n, i%500)
			plan[i] = Put(j)
		}
		mustApply(b, s, plan...)
	}
	b.ReportMetric(float64(b.N*len(jobs))/b.Elapsed().Seconds(), "binds/s")
}

func putAll(rs []Record) []Mutation {
	out := make([]Mutation, len(rs))
	for i, r := range rs {
		out[i] = Put(r)
	}
	return out
}

// bigStore writes 100,000 jobs and 10,000 instances once and returns the path.
func bigStore(b *testing.B) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	for c := 0; c < 100000; c += 10000 {
		jobs := make([]Record, 10000)
		for i := range jobs {
			jobs[i] = benchJob(c + i)
		}
		mustApply(b, s, putAll(jobs)...)
	}
	inst := make([]Record, 10000)
	for i := range inst {
		inst[i] = Record{Kind: KindInstance, ID: fmt.Sprintf("host-%05d", i), Project: "main", Fleet: "gpu", Status: InstanceIdle,
			Spec: []byte(`{"gpus":[{"name":"H100","memory":"80GB","count":8}],"cpu":192,"memory":"2TB"}`)}
	}
	mustApply(b, s, putAll(inst)...)
	s.Close()
	return path
}

// BenchmarkOpenRebuild opens a state file of 100,000 jobs and 10,000
// instances: read, decode and index everything.
func BenchmarkOpenRebuild(b *testing.B) {
	path := bigStore(b)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		s, err := Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if s.Jobs().Count() != 100000 || s.Instances().Count() != 10000 {
			b.Fatal("wrong counts")
		}
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/open")
}

// BenchmarkPointRead reads jobs by ID from the in-memory index of a store of
// 100,000 jobs, from one goroutine and from all cores.
func BenchmarkPointRead(b *testing.B) {
	s := openAt(b, filepath.Join(b.TempDir(), "state.db"), Options{})
	ids := make([]string, 100000)
	for c := 0; c < len(ids); c += 10000 {
		jobs := make([]Record, 10000)
		for i := range jobs {
			jobs[i] = benchJob(c + i)
			ids[c+i] = jobs[i].ID
		}
		mustApply(b, s, putAll(jobs)...)
	}
	jobsC := s.Jobs()
	b.Run("serial", func(b *testing.B) {
		for n := 0; n < b.N; n++ {
			if _, err := jobsC.Get(ids[n%len(ids)]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
	})
	b.Run("parallel", func(b *testing.B) {
		var ctr atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(ctr.Add(7919))
			for pb.Next() {
				i++
				if _, err := jobsC.Get(ids[i%len(ids)]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
	})
	b.Run("count-by-status", func(b *testing.B) {
		for n := 0; n < b.N; n++ {
			if jobsC.CountByStatus(JobSubmitted) != len(ids) {
				b.Fatal("wrong count")
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
	})
}
