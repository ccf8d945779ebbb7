package api

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// maxInput bounds the size of one configuration; real ones are a few KB.
const maxInput = 4 << 20

// ParseFile reads and parses the configuration at path. Errors name path.
func ParseFile(path string, opts ...Option) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	return Parse(path, data, opts...)
}

// Parse reads one configuration (YAML, or JSON, which is YAML too) and
// returns its validated, normalized spec with defaults filled in. filename
// is used only in error messages.
//
// When the input is invalid, Parse returns a nil Config and an ErrorList
// with every problem it found, each with file:line:col, the source line and
// a fix. Parse never panics on any input and does not resolve ${{ }}
// interpolations (see Interpolate).
func Parse(filename string, data []byte, opts ...Option) (*Config, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	d := &decoder{file: filename, src: trimBOM(data)}
	if len(data) > maxInput {
		d.fileError("the file is larger than 4MB", "split it; a configuration is a few kilobytes")
		return nil, d.errs
	}
	body := d.document()
	if body == nil {
		return nil, d.errs
	}
	cfg := d.config(body)
	if cfg == nil && len(d.errs) == 0 {
		d.errorAt(body, "", "this is not a configuration", "start it with a type, like `type: task`")
	}
	if len(d.errs) > 0 {
		return nil, d.errs.sorted()
	}
	if o.profile != nil {
		if run := cfg.Run(); run != nil {
			o.profile.applyTo(run)
		}
	}
	cfg.setDefaults()
	cfg.keys, cfg.file = d.keys, filename
	return cfg, nil
}

// Option changes how Parse reads a configuration.
type Option func(*options)

type options struct {
	profile *Profile
}

// WithProfile merges profile's fields into a run configuration as defaults:
// a field the configuration sets wins over the profile. It has no effect on
// fleets, volumes, gateways and queues. A nil profile is ignored.
func WithProfile(p *Profile) Option {
	return func(o *options) { o.profile = p }
}

// decoder walks goccy/go-yaml's AST and collects every error it meets; it is
// the one YAML decoder of gpud (profiles use it too).
type decoder struct {
	file    string
	src     []byte
	lines   []string
	errs    ErrorList
	anchors map[string]ast.Node
	depth   int
	// keys is where each key of the document is written, by its path.
	keys map[string]*Error
}

// document parses the source and returns the body of its only document, or
// nil after recording why there is none.
func (d *decoder) document() ast.Node {
	f, err := parser.ParseBytes(d.src, 0)
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) && ye.GetToken() != nil {
			tk := ye.GetToken()
			d.add(tk.Position.Line, tk.Position.Column, "", "invalid YAML: "+ye.GetMessage(), "")
		} else {
			d.fileError("invalid YAML: "+err.Error(), "")
		}
		return nil
	}
	var body ast.Node
	for _, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if body != nil {
			d.errorAt(doc.Body, "", "a file holds one configuration, and this is a second YAML document",
				"put each configuration in its own file")
			return nil
		}
		body = doc.Body
	}
	if body == nil {
		d.fileError("the configuration is empty", "start it with a type, like `type: task`")
	}
	return body
}

func (d *decoder) fileError(msg, fix string) {
	d.errs = append(d.errs, &Error{File: d.file, Message: msg, Fix: fix})
}

// add records an error at line:col.
func (d *decoder) add(line, col int, path, msg, fix string) {
	e := &Error{File: d.file, Line: line, Column: col, Path: path, Message: msg, Fix: fix}
	if line > 0 {
		if d.lines == nil {
			d.lines = splitLines(string(d.src))
		}
		if line <= len(d.lines) {
			e.Source = d.lines[line-1]
		}
	}
	d.errs = append(d.errs, e)
}

// errorAt records an error at node n (or at the file when n is nil).
func (d *decoder) errorAt(n ast.Node, path, msg, fix string) {
	line, col := position(n)
	d.add(line, col, path, msg, fix)
}

// position gives the line and column where n starts in the source.
func position(n ast.Node) (int, int) {
	switch v := n.(type) {
	case nil:
		return 0, 0
	case *ast.MappingNode:
		if len(v.Values) > 0 && !v.IsFlowStyle {
			return position(v.Values[0].Key)
		}
	case *ast.MappingValueNode:
		return position(v.Key)
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return 0, 0
	}
	return tk.Position.Line, tk.Position.Column
}

// resolve looks through anchors, aliases, tags and key wrappers to the node
// that holds the value. It returns nil for an unknown alias (after an error)
// or when aliases nest too deep.
func (d *decoder) resolve(n ast.Node, path string) ast.Node {
	for range 64 {
		switch v := n.(type) {
		case *ast.AnchorNode:
			if d.anchors == nil {
				d.anchors = map[string]ast.Node{}
			}
			if v.Name != nil {
				d.anchors[v.Name.String()] = v.Value
			}
			n = v.Value
		case *ast.AliasNode:
			name := ""
			if v.Value != nil {
				name = v.Value.String()
			}
			target, ok := d.anchors[name]
			if !ok {
				d.errorAt(n, path, fmt.Sprintf("alias *%s refers to no anchor defined before it", name), "define `&"+name+"` first")
				return nil
			}
			n = target
		case *ast.TagNode:
			n = v.Value
		case *ast.MappingKeyNode:
			n = v.Value
		default:
			return n
		}
	}
	d.errorAt(n, path, "aliases nest too deep", "simplify the anchors")
	return nil
}

// isNull reports whether n is absent or an explicit null (`key:` or `key: null`).
func isNull(n ast.Node) bool {
	if n == nil {
		return true
	}
	_, ok := n.(*ast.NullNode)
	return ok
}

// keyValue is one entry of a mapping, with merge keys (`<<`) expanded.
type keyValue struct {
	key   string
	keyN  ast.Node
	value ast.Node
}

// entries returns the entries of mapping n, or ok=false after an error when
// n is not a mapping. A null is an empty mapping.
func (d *decoder) entries(n ast.Node, path, what string) ([]keyValue, bool) {
	n = d.resolve(n, path)
	if n == nil {
		return nil, false
	}
	if isNull(n) {
		return nil, true
	}
	var values []*ast.MappingValueNode
	switch v := n.(type) {
	case *ast.MappingNode:
		values = v.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{v}
	default:
		d.errorAt(n, path, fmt.Sprintf("expected %s (a mapping of keys to values), found %s", what, describe(n)), "")
		return nil, false
	}
	d.depth++
	defer func() { d.depth-- }()
	if d.depth > 32 {
		d.errorAt(n, path, "the configuration nests too deep", "")
		return nil, false
	}
	out := make([]keyValue, 0, len(values))
	merged := false
	for _, mv := range values {
		if mv == nil || mv.Key == nil {
			continue
		}
		if mv.Key.IsMergeKey() {
			base, ok := d.entries(mv.Value, path, "a mapping to merge")
			if ok {
				out, merged = append(base, out...), true
			}
			continue
		}
		key := d.resolve(mv.Key, path)
		if key == nil {
			continue
		}
		name, ok := scalarText(key)
		if !ok {
			d.errorAt(mv.Key, path, "a key must be a plain name, found "+describe(key), "")
			continue
		}
		out = append(out, keyValue{key: name, keyN: mv.Key, value: mv.Value})
	}
	if !merged {
		return out, true // the YAML parser already rejects duplicate keys
	}
	// Keys written in the mapping override merged ones.
	seen := make(map[string]int, len(out))
	dedup := out[:0]
	for _, kv := range out {
		if i, ok := seen[kv.key]; ok {
			dedup[i] = kv
			continue
		}
		seen[kv.key] = len(dedup)
		dedup = append(dedup, kv)
	}
	return dedup, true
}

// fields maps each key a mapping may hold to the function that decodes its
// value; the function receives the value node and the value's path.
type fields map[string]func(n ast.Node, path string)

// object decodes mapping n with fs, reporting unknown keys with the closest
// known key. It returns the keys that have a non-null value, each with its
// value node (errors about a value point at it); nil when n is not a mapping.
func (d *decoder) object(n ast.Node, path, what string, fs fields) map[string]ast.Node {
	return d.objectWith(n, path, what, func(key string, v ast.Node, p string) bool {
		f, ok := fs[key]
		if ok {
			f(v, p)
		}
		return ok
	}, fs.names)
}

// names lists the keys of fs, sorted.
func (fs fields) names() []string {
	names := make([]string, 0, len(fs))
	for k := range fs {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// objectWith is object with the fields given as a decode function (a
// switch, for mappings decoded many times per file): decode reports false
// for a key it does not know, and names lists the keys it knows.
func (d *decoder) objectWith(n ast.Node, path, what string, decode func(key string, v ast.Node, p string) bool, names func() []string) map[string]ast.Node {
	kvs, ok := d.entries(n, path, what)
	if !ok {
		return nil
	}
	present := make(map[string]ast.Node, len(kvs))
	for _, kv := range kvs {
		p := join(path, kv.key)
		if !decode(kv.key, kv.value, p) {
			d.unknownField(kv, path, p, names())
			continue
		}
		// A null value counts as absent; errors about a value point at it.
		if r := d.resolveQuiet(kv.value); r != nil && !isNull(r) && kv.value.GetToken() != nil {
			present[kv.key] = kv.value
			d.markKey(kv.keyN, p)
		}
	}
	return present
}

func (d *decoder) unknownField(kv keyValue, parent, path string, names []string) {
	fix := ""
	switch {
	case slices.Contains(names, "resources") && isResourceKey(kv.key):
		fix = fmt.Sprintf("%s belongs under resources: indent it below `resources:`", kv.key)
	default:
		if s := suggest(kv.key, names); s != "" {
			fix = fmt.Sprintf("did you mean %s?", s)
		} else {
			fix = "known fields here: " + strings.Join(names, ", ")
		}
	}
	where := "here"
	if parent != "" {
		where = "in " + parent
	}
	d.errorAt(kv.keyN, path, fmt.Sprintf("unknown field %q %s", kv.key, where), fix)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// describe names the kind of a node for error messages.
func describe(n ast.Node) string {
	switch v := n.(type) {
	case nil, *ast.NullNode:
		return "nothing"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.BoolNode:
		return "a boolean"
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "the number " + v.GetToken().Value
	case *ast.StringNode, *ast.LiteralNode:
		s, _ := scalarText(n)
		if len(s) > 40 {
			s = s[:37] + "..."
		}
		return strconv.Quote(s)
	}
	return "a " + n.Type().String()
}

// scalarText returns a scalar's text as written (so `python: 3.10` stays
// "3.10"), unquoted.
func scalarText(n ast.Node) (string, bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		if v.Value == nil {
			return "", true
		}
		return v.Value.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return v.GetToken().Value, true
	}
	return "", false
}

// seq returns the items of list n, or ok=false after an error. A null is an
// empty list.
func (d *decoder) seq(n ast.Node, path, what string) ([]ast.Node, bool) {
	n = d.resolve(n, path)
	if n == nil {
		return nil, false
	}
	if isNull(n) {
		return nil, true
	}
	s, ok := n.(*ast.SequenceNode)
	if !ok {
		d.errorAt(n, path, fmt.Sprintf("expected %s, found %s", what, describe(n)), "write it as a list, one `- item` per line")
		return nil, false
	}
	return s.Values, true
}

// isSeq and isMap tell the forms of fields that accept several.
func (d *decoder) isSeq(n ast.Node) bool {
	_, ok := d.resolveQuiet(n).(*ast.SequenceNode)
	return ok
}

func (d *decoder) isMap(n ast.Node) bool {
	switch d.resolveQuiet(n).(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return true
	}
	return false
}

func (d *decoder) resolveQuiet(n ast.Node) ast.Node {
	before := len(d.errs)
	r := d.resolve(n, "")
	d.errs = d.errs[:before]
	return r
}

// str reads a scalar as text and checks its interpolations. ok is false
// (after an error) for lists and mappings; a null gives "" and ok.
func (d *decoder) str(n ast.Node, path string) (string, bool) {
	n = d.resolve(n, path)
	if n == nil {
		return "", false
	}
	if isNull(n) {
		return "", true
	}
	s, ok := scalarText(n)
	if !ok {
		fix := ""
		if mv, isPair := n.(*ast.MappingNode); isPair && len(mv.Values) == 1 && !mv.IsFlowStyle {
			fix = "YAML reads `text: more` as a mapping; put the whole value in quotes"
		}
		d.errorAt(n, path, "expected a string, found "+describe(n), fix)
		return "", false
	}
	d.checkInterpolation(n, path, s)
	return s, true
}

// strList reads a list of strings.
func (d *decoder) strList(n ast.Node, path string) []string {
	items, ok := d.seq(n, path, "a list of strings")
	if !ok {
		return nil
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		if s, ok := d.str(it, index(path, i)); ok {
			out = append(out, s)
		}
	}
	return out
}

// boolean reads true or false.
func (d *decoder) boolean(n ast.Node, path string) (bool, bool) {
	n = d.resolve(n, path)
	if n == nil || isNull(n) {
		return false, n != nil
	}
	if b, ok := n.(*ast.BoolNode); ok {
		return b.Value, true
	}
	if s, ok := scalarText(n); ok {
		switch strings.ToLower(s) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	d.errorAt(n, path, "expected true or false, found "+describe(n), "")
	return false, false
}

// integer reads a whole number within [lo, hi].
func (d *decoder) integer(n ast.Node, path string, lo, hi int) (int, bool) {
	n = d.resolve(n, path)
	if n == nil {
		return 0, false
	}
	s, ok := scalarText(n)
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if !ok || err != nil {
		d.errorAt(n, path, "expected a whole number, found "+describe(n), "")
		return 0, false
	}
	if v < lo || v > hi {
		d.errorAt(n, path, fmt.Sprintf("%d is out of range", v), fmt.Sprintf("use a number from %d to %d", lo, hi))
		return 0, false
	}
	return v, true
}

// number reads a finite number at or above zero.
func (d *decoder) number(n ast.Node, path string) (float64, bool) {
	n = d.resolve(n, path)
	if n == nil {
		return 0, false
	}
	s, ok := scalarText(n)
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if !ok || err != nil || v != v || v > 1e15 || v < 0 {
		d.errorAt(n, path, "expected a number at or above 0, found "+describe(n), "")
		return 0, false
	}
	return v, true
}

// value decodes a scalar with parse, reporting parse's error at n.
func value[T any](d *decoder, n ast.Node, path string, parse func(string) (T, error)) (T, bool) {
	var zero T
	if r := d.resolveQuiet(n); r != nil && isNull(r) {
		return zero, false // null means unset
	}
	s, ok := d.str(n, path)
	if !ok {
		return zero, false
	}
	v, err := parse(s)
	if err != nil {
		msg, fix := splitFix(err)
		d.errorAt(n, path, msg, fix)
		return zero, false
	}
	return v, true
}

// oneOf reads a string that must be one of allowed (case-insensitive).
func (d *decoder) oneOf(n ast.Node, path string, allowed ...string) (string, bool) {
	s, ok := d.str(n, path)
	if !ok || s == "" {
		return "", false
	}
	for _, a := range allowed {
		if strings.EqualFold(s, a) {
			return a, true
		}
	}
	fix := "use one of: " + strings.Join(allowed, ", ")
	if sg := suggest(s, allowed); sg != "" {
		fix = "did you mean " + sg + "? (" + fix + ")"
	}
	d.errorAt(n, path, fmt.Sprintf("%q is not allowed here", s), fix)
	return "", false
}

// require reports a missing field at the mapping that should hold it.
func (d *decoder) require(present map[string]ast.Node, at ast.Node, path, key, fix string) {
	if present == nil {
		return
	}
	if _, ok := present[key]; !ok {
		d.errorAt(at, join(path, key), "this field is required", fix)
	}
}

// trimBOM drops a UTF-8 byte order mark, which some editors write.
func trimBOM(b []byte) []byte { return bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) }

// splitLines splits src at YAML line breaks: "\r\n", "\n" or a lone "\r".
func splitLines(src string) []string {
	return strings.Split(strings.ReplaceAll(strings.ReplaceAll(src, "\r\n", "\n"), "\r", "\n"), "\n")
}
