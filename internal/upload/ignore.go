package upload

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// IgnoreFiles are read in every directory of a packed tree, in this order,
// so a later file's rule wins over an earlier one's: git's own, then
// dstack's, then gpud's.
var IgnoreFiles = []string{".gitignore", ".dstackignore", ".gpudignore"}

// rule is one line of an ignore file, as git reads it.
type rule struct {
	re      *regexp.Regexp
	negate  bool
	dirOnly bool
}

// ruleSet is the rules of one directory's ignore files; base is that
// directory, relative to the tree's root ("." for the root).
type ruleSet struct {
	base  string
	rules []rule
}

// readRules reads the ignore files of dir (base relative to the root).
func readRules(dir, base string) (ruleSet, error) {
	rs := ruleSet{base: base}
	for _, name := range IgnoreFiles {
		f, err := os.Open(filepath.Join(dir, name))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return rs, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if r, ok := parseRule(sc.Text()); ok {
				rs.rules = append(rs.rules, r)
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return rs, err
		}
	}
	return rs, nil
}

// parseRule turns one gitignore line into a rule (gitignore(5)): blank
// lines and # comments are skipped, ! negates, a trailing / matches only
// directories, a / at the start or in the middle anchors the pattern to
// the ignore file's directory, ** matches across directories.
func parseRule(line string) (rule, bool) {
	line = strings.TrimRight(line, "\r")
	if !strings.HasSuffix(line, "\\ ") {
		line = strings.TrimRight(line, " ")
	}
	if line == "" || strings.HasPrefix(line, "#") {
		return rule{}, false
	}
	var r rule
	if strings.HasPrefix(line, "!") {
		r.negate, line = true, line[1:]
	} else if strings.HasPrefix(line, "\\!") || strings.HasPrefix(line, "\\#") {
		line = line[1:]
	}
	if strings.HasSuffix(line, "/") {
		r.dirOnly, line = true, strings.TrimRight(line, "/")
	}
	if line == "" {
		return rule{}, false
	}
	anchored := strings.Contains(line, "/")
	line = strings.TrimPrefix(line, "/")
	var b strings.Builder
	b.WriteString("^")
	if !anchored {
		b.WriteString("(?:.*/)?")
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case strings.HasPrefix(line[i:], "**/"):
			b.WriteString("(?:.*/)?")
			i += 2
		case strings.HasPrefix(line[i:], "/**") && i+3 == len(line):
			b.WriteString("/.*")
			i += 2
		case strings.HasPrefix(line[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			end := strings.IndexByte(line[i+1:], ']')
			if end < 0 {
				b.WriteString(`\[`)
				continue
			}
			class := line[i+1 : i+1+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += end + 1
		case c == '\\' && i+1 < len(line):
			i++
			b.WriteString(regexp.QuoteMeta(string(line[i])))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return rule{}, false
	}
	r.re = re
	return r, true
}

// ignored reports whether rel (slash-separated, relative to the root) is
// ignored by the rule sets of its directory and those above it, the
// deepest set's last matching rule deciding, as in git.
func ignored(sets []ruleSet, rel string, isDir bool) bool {
	out := false
	for _, rs := range sets {
		p := rel
		if rs.base != "." {
			var ok bool
			if p, ok = strings.CutPrefix(rel, rs.base+"/"); !ok {
				continue
			}
		}
		for _, r := range rs.rules {
			if r.dirOnly && !isDir {
				continue
			}
			if r.re.MatchString(p) {
				out = !r.negate
			}
		}
	}
	return out
}
