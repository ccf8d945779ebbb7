package api

import (
	"errors"
	"strings"
	"testing"
)

func TestReferencesAcceptDstackNamespaces(t *testing.T) {
	tests := map[string]string{
		"${{ env.HF_TOKEN }}":                            "env/HF_TOKEN",
		"${{secrets.nvidia_ngc_api_key}}":                "secrets/nvidia_ngc_api_key",
		"${{ run.project_name }}.example.com":            "run/project_name",
		"data-${{ dstack.node_rank }}":                   "dstack/node_rank",
		"--head=${{ groups[0].nodes[0].IP_ADDRESS }}:80": "groups/[0].nodes[0].IP_ADDRESS",
		"a ${{ env.A }} b ${{ env.B }}":                  "env/A env/B",
		"no references at all, even with $HOME":          "",
	}
	for in, want := range tests {
		refs, err := References(in)
		if err != nil {
			t.Fatalf("References(%q): %v", in, err)
		}
		var got []string
		for _, r := range refs {
			got = append(got, r.Namespace+"/"+r.Path)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("References(%q) = %v, want %s", in, got, want)
		}
	}
}

func TestReferencesRejectMalformedExpressions(t *testing.T) {
	tests := map[string]string{
		"${{ secret.X }}":        "did you mean secrets",
		"${{ env.X ":             "is not closed",
		"${{ }}":                 "empty expression",
		"${{ env }}":             "names only a namespace",
		"${{ env..X }}":          "must follow each dot",
		"${{ groups.x }}":        "groups are indexed",
		"${{ groups[a].x }}":     "index is a number",
		"${{ env.X + 1 }}":       "malformed",
		"${{ process.env.X }}":   "unknown namespace",
		"ok ${{ env.A }} ${{ }}": "empty expression",
	}
	for in, want := range tests {
		_, err := References(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("References(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestInterpolateResolvesEveryReference(t *testing.T) {
	values := map[string]string{"env/USER": "ada", "secrets/token": "s3cret", "dstack/node_rank": "3"}
	resolve := func(r Reference) (string, error) {
		v, ok := values[r.Namespace+"/"+r.Path]
		if !ok {
			return "", errors.New("not set")
		}
		return v, nil
	}
	got, err := Interpolate("user=${{ env.USER }} token=${{secrets.token}} vol-${{ dstack.node_rank }}", resolve)
	if err != nil || got != "user=ada token=s3cret vol-3" {
		t.Fatalf("Interpolate = %q, %v", got, err)
	}
	if _, err := Interpolate("${{ env.MISSING }}", resolve); err == nil || !strings.Contains(err.Error(), "${{ env.MISSING }}") {
		t.Fatalf("an unresolvable reference must fail and name it, got %v", err)
	}
}

func TestParseChecksInterpolationWhereverStringsAppear(t *testing.T) {
	src := "type: service\nport: 8000\ncommands: [\"echo ${{ run.args }}\"]\nprobes:\n  - url: /h\n    headers:\n      - name: K\n        value: ${{ envs.KEY }}\n"
	_, err := Parse("s.yml", []byte(src))
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 1 {
		t.Fatalf("want one error, got %v", err)
	}
	e := list[0]
	if e.Path != "probes[0].headers[0].value" || e.Line != 8 || e.Column != 16 || !strings.Contains(e.Fix, "did you mean env") {
		t.Fatalf("got %s", e.Detail())
	}
}
