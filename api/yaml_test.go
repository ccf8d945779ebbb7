package api

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeYAMLIsStrictAndPointsAtTheProblem(t *testing.T) {
	var v struct {
		Name  string `yaml:"name"`
		Count int    `yaml:"count"`
	}
	tests := []struct {
		name, src, want string
		line            int
	}{
		{"unknown field", "name: a\ncuont: 2\n", `unknown field "cuont"`, 2},
		{"wrong type", "name: a\ncount: lots\n", "cannot unmarshal", 2},
		{"invalid YAML", "name: [a\n", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := DecodeYAML("f.yml", []byte(tc.src), &v)
			var list ErrorList
			if !errors.As(err, &list) || len(list) != 1 {
				t.Fatalf("error %v, want an ErrorList of one", err)
			}
			e := list[0]
			if e.File != "f.yml" || !strings.Contains(e.Message, tc.want) || (tc.line > 0 && e.Line != tc.line) {
				t.Fatalf("error %+v, want f.yml line %d containing %q", e, tc.line, tc.want)
			}
			if tc.line > 0 && (e.Source == "" || !strings.HasPrefix(e.Error(), "f.yml:")) {
				t.Fatalf("error %q lacks its position or source line", e.Detail())
			}
		})
	}
	if err := DecodeYAML("f.yml", []byte("name: a\ncount: 2\n"), &v); err != nil || v.Name != "a" || v.Count != 2 {
		t.Fatalf("valid input: %+v, %v", v, err)
	}
}

func FuzzDecodeYAML(f *testing.F) {
	f.Add([]byte("name: a\ncount: 2\n"))
	f.Add([]byte("name: [a\n"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var v struct {
			Name  string           `yaml:"name"`
			Items []map[string]any `yaml:"items"`
		}
		_ = DecodeYAML("fuzz.yml", data, &v) // must not panic
	})
}
