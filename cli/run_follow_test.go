package cli

import (
	"testing"

	"gpud.dev/gpud/api"
)

func intp(i int) *int { return &i }

func TestRunExitCodeFollowsTheFirstJob(t *testing.T) {
	tests := []struct {
		name     string
		run      api.Run
		want     int
		finished bool
	}{
		{"running runs have no exit code yet", api.Run{Status: "running"}, 0, false},
		{"the run's exit code wins", api.Run{Status: "failed", ExitCode: intp(3), Jobs: []api.Job{{ExitCode: intp(9)}}}, 3, true},
		{"else the first job's", api.Run{Status: "failed", Jobs: []api.Job{{ExitCode: intp(9)}}}, 9, true},
		{"done without codes is 0", api.Run{Status: "done"}, 0, true},
		{"failed without codes is 1", api.Run{Status: "failed"}, 1, true},
		{"terminated without codes is 1", api.Run{Status: "terminated"}, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, finished := runExitCode(tt.run)
			if got != tt.want || finished != tt.finished {
				t.Fatalf("runExitCode = %d, %v; want %d, %v", got, finished, tt.want, tt.finished)
			}
		})
	}
}
