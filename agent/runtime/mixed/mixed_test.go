package mixed

import (
	"context"
	"testing"
	"time"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// recorder is a runtime that records which jobs it was asked about.
type recorder struct {
	name  string
	id    string // handle id shape
	found []runtime.Found
	calls []string
}

func (r *recorder) Name() string { return r.name }
func (r *recorder) Start(_ context.Context, spec api.JobSpec, _ func()) (runtime.Handle, error) {
	r.calls = append(r.calls, "start "+spec.ID)
	return runtime.Handle{JobID: spec.ID, ID: r.id}, nil
}
func (r *recorder) Wait(_ context.Context, h runtime.Handle) (runtime.Exit, error) {
	r.calls = append(r.calls, "wait "+h.JobID)
	return runtime.Exit{}, nil
}
func (r *recorder) Stop(_ context.Context, h runtime.Handle, _ time.Duration) error {
	r.calls = append(r.calls, "stop "+h.JobID)
	return nil
}
func (r *recorder) Logs(_ context.Context, h runtime.Handle, _ runtime.LogOptions, _ func(api.JobLogEntry) error) error {
	r.calls = append(r.calls, "logs "+h.JobID)
	return nil
}
func (r *recorder) Usage(_ context.Context, h runtime.Handle) (runtime.Usage, error) {
	r.calls = append(r.calls, "usage "+h.JobID)
	return runtime.Usage{}, nil
}
func (r *recorder) Adopt(context.Context) ([]runtime.Found, error) { return r.found, nil }
func (r *recorder) Remove(_ context.Context, h runtime.Handle) error {
	r.calls = append(r.calls, "remove "+h.JobID)
	return nil
}
func (r *recorder) Close() error { r.calls = append(r.calls, "close"); return nil }

// Jobs with an image go to Docker and image-less ones to processes; every
// later call follows the job to the runtime that holds it, whether it was
// started here, adopted, or only known by its handle's shape.
func TestMixedRoutesEachJobToTheRuntimeThatHoldsIt(t *testing.T) {
	ctx := context.Background()
	d := &recorder{name: "docker", id: "c0ffee", found: []runtime.Found{{Handle: runtime.Handle{JobID: "adopted-c", ID: "abc:odd"}}}}
	p := &recorder{name: "process", id: "123:456", found: []runtime.Found{{Handle: runtime.Handle{JobID: "adopted-p", ID: "deadbeef"}}}}
	m := New(d, p)
	if m.Name() != Name {
		t.Fatalf("name %q", m.Name())
	}
	img, err := m.Start(ctx, api.JobSpec{ID: "img", Image: "busybox"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bare, err := m.Start(ctx, api.JobSpec{ID: "bare"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if found, err := m.Adopt(ctx); err != nil || len(found) != 2 {
		t.Fatalf("adopt: %v %v", found, err)
	}
	// Adopted jobs are routed by where they were found, not by id shape.
	handles := []runtime.Handle{img, bare, {JobID: "adopted-c", ID: "abc:odd"}, {JobID: "adopted-p", ID: "deadbeef"},
		{JobID: "unseen-p", ID: "9:9"}, {JobID: "unseen-c", ID: "f00"}}
	for _, h := range handles {
		if _, err := m.Wait(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	want := map[*recorder][]string{
		d: {"start img", "wait img", "wait adopted-c", "wait unseen-c"},
		p: {"start bare", "wait bare", "wait adopted-p", "wait unseen-p"},
	}
	for r, w := range want {
		if len(r.calls) != len(w) {
			t.Fatalf("%s calls %q, want %q", r.name, r.calls, w)
		}
		for i := range w {
			if r.calls[i] != w[i] {
				t.Fatalf("%s calls %q, want %q", r.name, r.calls, w)
			}
		}
	}
	if err := m.Close(); err != nil || d.calls[len(d.calls)-1] != "close" || p.calls[len(p.calls)-1] != "close" {
		t.Fatalf("close: %v; docker %q process %q", err, d.calls, p.calls)
	}
}
