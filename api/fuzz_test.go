package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse. Properties: it never panics;
// it returns either a Config or an ErrorList whose errors have positions
// inside the input; a Config's normalized JSON parses back to the same
// JSON and sets the same fields (SetFields). Seeds: every example in testdata/configs (valid and invalid) plus
// the checked-in corpus in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"../testdata/configs/*.yml", "../testdata/configs/invalid/*.yml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yml", data)
		if err != nil {
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is not a non-empty ErrorList: %T %v", err, err)
			}
			lines := len(splitLines(string(data)))
			for _, e := range list {
				if e.Line < 0 || e.Line > lines+1 || e.Column < 0 {
					t.Fatalf("error position %d:%d outside the input of %d lines", e.Line, e.Column, lines)
				}
				_ = e.Detail()
			}
			return
		}
		first, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal a parsed config: %v", err)
		}
		again, err := Parse("fuzz.json", first)
		if err != nil {
			t.Fatalf("normalized JSON does not parse back: %v\n%s", err, first)
		}
		second, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("round trip changed the spec:\n%s\n%s", first, second)
		}
		// The fields a configuration sets are the same read from its
		// normalized JSON (defaults are never "set"), and each is anchored
		// inside the input.
		set := SetFields(cfg)
		if again := SetFields(again); !slices.Equal(set, again) {
			t.Fatalf("set fields differ after the round trip:\n%v\n%v", set, again)
		}
		lines := len(splitLines(string(data)))
		for _, p := range set {
			if e := cfg.At(p, "m", ""); e.Line < 0 || e.Line > lines+1 {
				t.Fatalf("field %s anchored at line %d of %d", p, e.Line, lines)
			}
		}
	})
}
