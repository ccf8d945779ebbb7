package api

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Error is one problem in a configuration, anchored to the place that causes
// it. Line and Column are 1-based; both are 0 when the problem concerns the
// whole file (it cannot be read, or it is empty).
type Error struct {
	File    string // the name given to Parse; may be empty
	Line    int
	Column  int
	Path    string // the field, like "resources.gpu" or "volumes[1].path"; empty for the document
	Message string // what is wrong
	Fix     string // how to fix it; may be empty
	Source  string // the source line the error points into; may be empty
}

// Error formats the error on one line: "file:line:col: path: message — fix".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.position())
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	if e.Fix != "" {
		b.WriteString(" — ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Detail formats the error with the source line and a caret under the column
// it points to, as `gpud validate` prints it.
func (e *Error) Detail() string {
	s := e.Error()
	if e.Source == "" || e.Column < 1 {
		return s
	}
	src := strings.ReplaceAll(e.Source, "\t", " ")
	return s + "\n    " + src + "\n    " + strings.Repeat(" ", min(e.Column-1, len(src))) + "^"
}

func (e *Error) position() string {
	name := e.File
	if name == "" {
		name = "<input>"
	}
	if e.Line == 0 {
		return name
	}
	return fmt.Sprintf("%s:%d:%d", name, e.Line, e.Column)
}

// ErrorList holds every error found in one configuration, in source order.
// Parse returns it as the error value whenever the input is invalid, so a
// caller gets all problems at once; use errors.As to reach it.
type ErrorList []*Error

// Error prints each error with its source line and caret, one after another.
func (l ErrorList) Error() string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = e.Detail()
	}
	return strings.Join(parts, "\n")
}

// Unwrap exposes the individual errors to errors.As and errors.Is.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

func (l ErrorList) sorted() ErrorList {
	sort.SliceStable(l, func(i, j int) bool {
		if l[i].Line != l[j].Line {
			return l[i].Line < l[j].Line
		}
		return l[i].Column < l[j].Column
	})
	return l
}

// suggest returns the candidate closest to word by edit distance when it is
// close enough to be a plausible typo, or "".
func suggest(word string, candidates []string) string {
	best, bestDist := "", len(word)/3+2
	w := strings.ToLower(word)
	for _, c := range candidates {
		if d := editDistance(w, c); d < bestDist || (d == bestDist && best != "" && c < best) {
			best, bestDist = c, d
		}
	}
	if bestDist > 2 && bestDist*3 > len(word) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// splitFix splits a value error "what is wrong: how to fix it" into its
// two parts, skipping a leading quoted value or ${{ }} expression, which
// may itself hold ": ".
func splitFix(err error) (msg, fix string) {
	s := err.Error()
	start := 0
	if q, qerr := strconv.QuotedPrefix(s); qerr == nil {
		start = len(q)
	} else if strings.HasPrefix(s, "${{") {
		if i := strings.Index(s, "}}"); i >= 0 {
			start = i + 2
		}
	}
	if i := strings.Index(s[start:], ": "); i >= 0 {
		return s[:start+i], s[start+i+2:]
	}
	return s, ""
}
