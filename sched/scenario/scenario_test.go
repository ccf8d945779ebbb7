package scenario

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScenarios runs every scenario in testdata/sched and checks its
// expect: block: the scenarios are the scheduler's readable specification.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("../../testdata/sched/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 60 {
		t.Errorf("want at least 60 scenarios, found %d", len(files))
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(data, []byte("#")) {
				t.Errorf("the file must start with a comment saying what behaviour it proves")
			}
			s, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if !s.HasExpect {
				t.Fatal("the scenario has no expect: block")
			}
			res := Run(s)
			for _, d := range CheckRun(s, res) {
				t.Error(d)
			}
			again := Run(s)
			if show(again.Final) != show(res.Final) {
				t.Error("a second run of the same scenario gave a different result")
			}
		})
	}
}
