package api

import (
	"errors"
	"strings"
	"testing"
)

func TestParseReportsEveryErrorOfAFileAtOnce(t *testing.T) {
	src := `type: task
name: Bad_Name
comands: [x]
resources:
  gpu: H100:x
  memory: lots
max_duration: soon
`
	_, err := Parse("task.yml", []byte(src))
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("want ErrorList, got %T %v", err, err)
	}
	want := []string{
		"task.yml:2:7: name:",
		"task.yml:3:1: comands: unknown field \"comands\" here — did you mean commands?",
		"task.yml:5:8: resources.gpu: \"H100:x\" — count must be a number or range like 2 or 1..8",
		"task.yml:6:11: resources.memory:",
		"task.yml:7:15: max_duration:",
	}
	if len(list) != len(want) {
		t.Fatalf("want %d errors, got %d:\n%v", len(want), len(list), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(list[i].Error(), w) {
			t.Errorf("error %d = %q, want prefix %q", i, list[i].Error(), w)
		}
	}
	var one *Error
	if !errors.As(err, &one) || one.Line != 2 {
		t.Errorf("errors.As should reach the first *Error, got %+v", one)
	}
}

func TestErrorDetailShowsSourceLineAndCaret(t *testing.T) {
	_, err := Parse("t.yml", []byte("type: task\nresources:\n  gpu: H100:x\n"))
	got := err.Error()
	want := "t.yml:3:8: resources.gpu: \"H100:x\" — count must be a number or range like 2 or 1..8\n" +
		"      gpu: H100:x\n" +
		"           ^"
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestUnknownFieldSuggestsTheClosestKnownField(t *testing.T) {
	tests := map[string]string{
		"type: task\nenvv: [A=1]\n":                            "did you mean env?",
		"type: service\nport: 80\ncommands: [x]\nreplica: 2\n": "did you mean replicas?",
		"type: fleet\nnodes: 1\nplacment: cluster\n":           "did you mean placement?",
		"type: gateway\nbackend: aws\nregion: r\ndomian: x\n":  "did you mean domain?",
		"type: task\nzzzzzz: 1\n":                              "known fields here:",
	}
	for src, want := range tests {
		_, err := Parse("x.yml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", src, err, want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"gpu", "cpu", 1}, {"comands", "commands", 1}, {"kitten", "sitting", 3}, {"", "abc", 3}} {
		if got := editDistance(tt.a, tt.b); got != tt.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.d)
		}
	}
}

func TestSplitFixKeepsQuotedValuesWhole(t *testing.T) {
	tests := []struct{ in, msg, fix string }{
		{`"a: b" is not a size: write 24GB`, `"a: b" is not a size`, "write 24GB"},
		{`"16..8": cpu must be a count`, `"16..8"`, "cpu must be a count"},
		{`${{ a: b }} uses an unknown namespace "a": use env`, `${{ a: b }} uses an unknown namespace "a"`, "use env"},
		{"no fix here", "no fix here", ""},
	}
	for _, tt := range tests {
		msg, fix := splitFix(errors.New(tt.in))
		if msg != tt.msg || fix != tt.fix {
			t.Errorf("splitFix(%q) = %q, %q; want %q, %q", tt.in, msg, fix, tt.msg, tt.fix)
		}
	}
}
