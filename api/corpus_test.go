package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"gpud.dev/gpud/internal/testutil"
)

// malformedDstackSnippets are the two documentation snippets whose resource
// fields sit at the top level; gpud must reject them with positions.
var malformedDstackSnippets = map[string]bool{
	"docs__guides__migration__slurm__4.yml": true,
	"docs__guides__migration__slurm__5.yml": true,
}

// normalizedJSON marshals cfg the way `gpud validate --json` prints it.
func normalizedJSON(t testing.TB, cfg *Config) []byte {
	t.Helper()
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

// checkRoundTrip proves that the normalized JSON, and the YAML made from
// it, are valid configurations that parse back to the same spec.
func checkRoundTrip(t *testing.T, name string, cfg *Config) {
	t.Helper()
	first := normalizedJSON(t, cfg)
	again, err := Parse(name+".json", first)
	if err != nil {
		t.Fatalf("normalized JSON does not parse back:\n%v\n%s", err, first)
	}
	if second := normalizedJSON(t, again); !bytes.Equal(first, second) {
		t.Fatalf("JSON round trip changed the spec:\nfirst:  %s\nsecond: %s", first, second)
	}
	y, err := yaml.JSONToYAML(first)
	if err != nil {
		t.Fatalf("JSON to YAML: %v", err)
	}
	fromYAML, err := Parse(name+".yaml", y)
	if err != nil {
		t.Fatalf("normalized YAML does not parse back:\n%v\n%s", err, y)
	}
	if third := normalizedJSON(t, fromYAML); !bytes.Equal(first, third) {
		t.Fatalf("YAML round trip changed the spec:\nfirst: %s\nthird: %s", first, third)
	}
}

func TestWrittenExamplesParseAndRoundTrip(t *testing.T) {
	files, err := filepath.Glob("../testdata/configs/*.yml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../testdata/hello.yml")
	if len(files) < 41 {
		t.Fatalf("want at least 40 examples in testdata/configs, found %d", len(files)-1)
	}
	seen := map[Kind]int{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, err := ParseFile(f)
			if err != nil {
				t.Fatalf("valid example rejected:\n%v", err)
			}
			seen[cfg.Kind]++
			checkRoundTrip(t, f, cfg)
		})
	}
	for _, k := range Kinds() {
		if seen[Kind(k)] == 0 {
			t.Errorf("no example of type %s in testdata/configs", k)
		}
	}
}

// expectation is the first line of an invalid example:
// "# error: LINE:COL path: message — fix" (a substring of the error).
type expectation struct {
	line, col int
	text      string
}

func readExpectation(t *testing.T, data []byte) expectation {
	t.Helper()
	first, _, _ := bytes.Cut(data, []byte("\n"))
	rest, ok := strings.CutPrefix(string(first), "# error: ")
	if !ok {
		t.Fatalf("first line must be `# error: LINE:COL text`, found %q", first)
	}
	pos, text, _ := strings.Cut(rest, " ")
	var e expectation
	if _, err := fmt.Sscanf(pos, "%d:%d", &e.line, &e.col); err != nil {
		t.Fatalf("bad position %q in %q", pos, first)
	}
	e.text = text
	return e
}

func TestInvalidExamplesReportTheExpectedErrorAtItsPosition(t *testing.T) {
	files, err := filepath.Glob("../testdata/configs/invalid/*.yml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("want at least 20 invalid examples, found %d", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want := readExpectation(t, data)
			_, err = Parse(f, data)
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("want an ErrorList, got %v", err)
			}
			for _, e := range list {
				if e.Line == want.line && e.Column == want.col && strings.Contains(e.Error(), want.text) {
					if e.File != f {
						t.Errorf("error names file %q, want %q", e.File, f)
					}
					if e.Line > 0 && !strings.Contains(e.Detail(), "^") {
						t.Errorf("error detail has no caret:\n%s", e.Detail())
					}
					return
				}
			}
			t.Fatalf("want an error at %d:%d containing %q; got:\n%v", want.line, want.col, want.text, err)
		})
	}
}

func TestDstackExamplesAreAcceptedExceptTheTwoMalformedSnippets(t *testing.T) {
	dstackExamples := testutil.DstackExamples(t, "..")
	entries, err := os.ReadDir(dstackExamples)
	if err != nil {
		t.Fatalf("read the dstack compatibility corpus %s: %v", dstackExamples, err)
	}
	var checked, rejected int
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".yml") && !strings.HasSuffix(name, ".yaml") {
			continue
		}
		checked++
		t.Run(name, func(t *testing.T) {
			cfg, err := ParseFile(filepath.Join(dstackExamples, name))
			if malformedDstackSnippets[name] {
				var list ErrorList
				if !errors.As(err, &list) || len(list) == 0 {
					t.Fatalf("malformed snippet accepted; want errors with positions, got %v", err)
				}
				for _, e := range list {
					if e.Line == 0 || e.Column == 0 || !strings.Contains(e.Fix, "resources") {
						t.Errorf("want a positioned error that says to move the field under resources, got %v", e)
					}
				}
				rejected++
				return
			}
			if err != nil {
				t.Fatalf("dstack example rejected:\n%v", err)
			}
			checkRoundTrip(t, name, cfg)
		})
	}
	if checked < 170 {
		t.Fatalf("found only %d dstack examples in %s; the corpus has 175", checked, dstackExamples)
	}
	if rejected != len(malformedDstackSnippets) {
		t.Fatalf("checked %d malformed snippets, want %d", rejected, len(malformedDstackSnippets))
	}
}

func TestConfigJSONMethodsGoThroughParse(t *testing.T) {
	cfg, err := ParseFile("../testdata/configs/task-elastic-nodes.yml")
	if err != nil {
		t.Fatal(err)
	}
	byValue, err := json.Marshal(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, normalizedJSON(t, cfg)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(byValue, compact.Bytes()) {
		t.Fatalf("marshal by value differs from by pointer:\n%s\n%s", byValue, compact.Bytes())
	}
	var back Config
	if err := json.Unmarshal(byValue, &back); err != nil {
		t.Fatalf("unmarshal normalized JSON: %v", err)
	}
	if back.Task == nil || !back.Task.Elastic() || back.Task.Queue != "research" {
		t.Fatalf("unmarshalled config lost fields: %+v", back.Task)
	}
	var bad Config
	err = json.Unmarshal([]byte(`{"type": "task", "nodes": "2.."}`), &bad)
	var list ErrorList
	if !errors.As(err, &list) || list[0].Path != "nodes" {
		t.Fatalf("invalid JSON config must fail with the parser's errors, got %v", err)
	}
}
