package api

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// Interpolation namespaces: ${{ env.X }} (the client's environment or the
// run's env), ${{ secrets.X }} (project secrets), ${{ run.X }} (run
// metadata such as name, project_name, args), ${{ dstack.X }} (per-job
// values such as node_rank) and ${{ groups[i].nodes[j].X }} (addresses of
// other node groups of a task).
const (
	NamespaceEnv     = "env"
	NamespaceSecrets = "secrets"
	NamespaceRun     = "run"
	NamespaceDstack  = "dstack"
	NamespaceGroups  = "groups"
)

// Reference is one ${{ namespace.path }} expression inside a string.
// Start and End are the byte offsets of "${{" and just after "}}".
type Reference struct {
	Namespace string // env, secrets, run, dstack or groups
	Path      string // what follows the namespace: "HF_TOKEN", "[0].nodes[0].IP_ADDRESS"
	Start     int
	End       int
}

// String writes the reference in canonical form: ${{ env.X }}.
func (r Reference) String() string {
	sep := "."
	if strings.HasPrefix(r.Path, "[") {
		sep = ""
	}
	return "${{ " + r.Namespace + sep + r.Path + " }}"
}

// References finds every ${{ }} expression in s and checks its syntax and
// namespace. The error names the first bad expression and how to fix it.
func References(s string) ([]Reference, error) {
	var refs []Reference
	for off := 0; ; {
		i := strings.Index(s[off:], "${{")
		if i < 0 {
			return refs, nil
		}
		start := off + i
		j := strings.Index(s[start+3:], "}}")
		if j < 0 {
			return refs, fmt.Errorf("%q is not closed: end the expression with }}", excerpt(s[start:]))
		}
		end := start + 3 + j + 2
		expr := strings.TrimSpace(s[start+3 : end-2])
		ns, path, err := splitReference(expr)
		if err != nil {
			return refs, err
		}
		refs = append(refs, Reference{Namespace: ns, Path: path, Start: start, End: end})
		off = end
	}
}

func excerpt(s string) string {
	if len(s) > 30 {
		return s[:27] + "..."
	}
	return s
}

// splitReference checks `namespace(.ident | [n])+` and splits it.
func splitReference(expr string) (string, string, error) {
	if expr == "" {
		return "", "", fmt.Errorf("empty expression ${{ }}: write a reference like ${{ env.NAME }} or ${{ secrets.NAME }}")
	}
	k := 0
	for k < len(expr) && isIdentByte(expr[k], k == 0) {
		k++
	}
	ns, rest := expr[:k], expr[k:]
	switch ns {
	case NamespaceEnv, NamespaceSecrets, NamespaceRun, NamespaceDstack, NamespaceGroups:
	default:
		fix := "use env, secrets, run, dstack or groups, like ${{ env.NAME }}"
		if s := suggest(ns, []string{NamespaceEnv, NamespaceSecrets, NamespaceRun, NamespaceDstack, NamespaceGroups}); s != "" && ns != "" {
			fix = "did you mean " + s + "? (" + fix + ")"
		}
		return "", "", fmt.Errorf("${{ %s }} uses an unknown namespace %q: %s", expr, ns, fix)
	}
	if rest == "" {
		return "", "", fmt.Errorf("${{ %s }} names only a namespace: add a field, like ${{ %s.NAME }}", expr, ns)
	}
	if ns == NamespaceGroups && rest[0] != '[' {
		return "", "", fmt.Errorf("${{ %s }}: groups are indexed: write ${{ groups[0].nodes[0].IP_ADDRESS }}", expr)
	}
	for p := 0; p < len(rest); {
		switch rest[p] {
		case '.':
			q := p + 1
			for q < len(rest) && isIdentByte(rest[q], q == p+1) {
				q++
			}
			if q == p+1 {
				return "", "", fmt.Errorf("${{ %s }} is malformed: a field name must follow each dot", expr)
			}
			p = q
		case '[':
			q := p + 1
			for q < len(rest) && rest[q] >= '0' && rest[q] <= '9' {
				q++
			}
			if q == p+1 || q >= len(rest) || rest[q] != ']' {
				return "", "", fmt.Errorf("${{ %s }} is malformed: an index is a number in brackets, like [0]", expr)
			}
			p = q + 1
		default:
			return "", "", fmt.Errorf("${{ %s }} is malformed: write namespace.field, like ${{ env.NAME }}", expr)
		}
	}
	return ns, strings.TrimPrefix(rest, "."), nil
}

func isIdentByte(c byte, first bool) bool {
	return c == '_' || c == '-' && !first || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
}

// Interpolate replaces every ${{ }} reference in s with what resolve
// returns for it. It fails on a malformed expression or when resolve fails;
// the server calls it when it builds a job, with its secrets and run data.
func Interpolate(s string, resolve func(Reference) (string, error)) (string, error) {
	refs, err := References(s)
	if err != nil || len(refs) == 0 {
		return s, err
	}
	var b strings.Builder
	last := 0
	for _, r := range refs {
		v, err := resolve(r)
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", r, err)
		}
		b.WriteString(s[last:r.Start])
		b.WriteString(v)
		last = r.End
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

// checkInterpolation reports a malformed ${{ }} in scalar n at its position.
func (d *decoder) checkInterpolation(n ast.Node, path, s string) {
	if !strings.Contains(s, "${{") {
		return
	}
	_, err := References(s)
	if err == nil {
		return
	}
	line, col := position(n)
	// Point at the expression itself when the scalar is written plain.
	if tk := n.GetToken(); tk != nil && strings.TrimSpace(tk.Origin) == s {
		col += strings.Index(s, "${{")
	}
	msg, fix := splitFix(err)
	d.add(line, col, path, msg, fix)
}
