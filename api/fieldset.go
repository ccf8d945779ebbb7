package api

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/goccy/go-yaml/ast"
)

// This file lists the fields of each kind's spec by reflection, for the
// server's field rules (DESIGN.md §12: every field takes effect or the plan
// refuses it) and their coverage test: a field added to a spec type shows
// up here without anyone listing it by hand.

// FieldPaths returns the path of every field a configuration of kind k can
// hold, parents before children, in the configuration's own names
// ("resources.gpu.name", "replicas.commands"). List items are named by the
// list's path without an index.
func FieldPaths(k Kind) []string {
	spec := Defaults(k).spec()
	if spec == nil {
		return nil
	}
	var out []string
	walkType(reflect.TypeOf(spec).Elem(), "", &out)
	return out
}

// SetFields returns the paths of the fields of c that differ from its
// kind's defaults, parents before children, list items with their index
// ("volumes[0].path"). A field written with its default value counts as
// not set: it changes nothing.
func SetFields(c *Config) []string {
	spec, def := c.spec(), Defaults(c.Kind).spec()
	if spec == nil || def == nil {
		return nil
	}
	var out []string
	diffStruct(reflect.ValueOf(spec).Elem(), reflect.ValueOf(def).Elem(), "", &out)
	return out
}

// StripIndex turns a concrete path ("replicas[1].commands") into its
// field's path ("replicas.commands").
func StripIndex(path string) string {
	if !strings.Contains(path, "[") {
		return path
	}
	var b strings.Builder
	skip := false
	for _, c := range path {
		switch {
		case c == '[':
			skip = true
		case c == ']':
			skip = false
		case !skip:
			b.WriteRune(c)
		}
	}
	return b.String()
}

var (
	defaultsMu sync.Mutex
	defaults   = map[Kind]*Config{}
)

// Defaults returns what a configuration of kind k holds when it sets
// nothing but its type: every default the decoder and setDefaults fill
// in. The caller must not modify it.
func Defaults(k Kind) *Config {
	defaultsMu.Lock()
	defer defaultsMu.Unlock()
	if c, ok := defaults[k]; ok {
		return c
	}
	d := &decoder{src: []byte("type: " + strconv.Quote(string(k)))}
	c := &Config{Kind: k}
	if body := d.document(); body != nil {
		if got := d.config(body); got != nil {
			c = got // the required fields it lacks are errors, ignored here
		}
	}
	c.setDefaults()
	defaults[k] = c
	return c
}

var marshalerType = reflect.TypeFor[json.Marshaler]()

// fieldName is a struct field's configuration name: its JSON name, "" for
// an embedded struct whose fields are inlined, "-" for none.
func fieldName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	name, _, _ := strings.Cut(tag, ",")
	if f.Anonymous && name == "" {
		return ""
	}
	if name == "" || !f.IsExported() {
		return "-"
	}
	return name
}

// container reports whether t is a struct the walk descends into: one with
// JSON-named fields and no grammar of its own (a type with MarshalJSON,
// like Range or Duration, is one value).
func container(t reflect.Type) bool {
	if t.Kind() != reflect.Struct || t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType) {
		return false
	}
	for i := range t.NumField() {
		if fieldName(t.Field(i)) != "-" {
			return true
		}
	}
	return false
}

// items returns the element type of the values listed under a field of
// type t (a slice or pointer of containers, or the groups of Replicas),
// or nil when t holds none.
func items(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t == reflect.TypeFor[Replicas]() {
		return reflect.TypeFor[ReplicaGroup]()
	}
	if container(t) {
		return t
	}
	return nil
}

func walkType(t reflect.Type, path string, out *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		switch name := fieldName(f); name {
		case "-":
		case "":
			walkType(f.Type, path, out)
		default:
			p := joinPath(path, name)
			*out = append(*out, p)
			if it := items(f.Type); it != nil {
				walkType(it, p, out)
			}
		}
	}
}

func diffStruct(v, def reflect.Value, path string, out *[]string) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		switch name := fieldName(f); name {
		case "-":
		case "":
			diffStruct(v.Field(i), def.Field(i), path, out)
		default:
			fv, dv := v.Field(i), def.Field(i)
			if reflect.DeepEqual(fv.Interface(), dv.Interface()) || emptyList(fv) && emptyList(dv) {
				continue // an empty list (`regions:` with no value) sets nothing either
			}
			p := joinPath(path, name)
			*out = append(*out, p)
			diffItems(fv, dv, p, out)
		}
	}
}

// diffItems descends into the containers a differing field holds: a
// struct against its default, list items against an empty item.
func diffItems(v, def reflect.Value, path string, out *[]string) {
	switch {
	case v.Type() == reflect.TypeFor[Replicas]():
		diffItems(v.FieldByName("Groups"), def.FieldByName("Groups"), path, out)
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			return
		}
		if def.IsNil() {
			def = reflect.New(v.Type().Elem())
		}
		diffItems(v.Elem(), def.Elem(), path, out)
	case v.Kind() == reflect.Slice:
		if items(v.Type()) == nil {
			return
		}
		for i := range v.Len() {
			e := v.Index(i)
			diffItems(e, reflect.Zero(e.Type()), path+"["+strconv.Itoa(i)+"]", out)
		}
	case container(v.Type()):
		diffStruct(v, def, path, out)
	}
}

// emptyList reports whether v is a slice or map without elements (nil or not).
func emptyList(v reflect.Value) bool {
	return (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.Len() == 0
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// markKey remembers where the key of path is written, for errors about the
// field that the server finds later (Config.At).
func (d *decoder) markKey(key ast.Node, path string) {
	if d.keys == nil {
		d.keys = map[string]*Error{}
	}
	if _, ok := d.keys[path]; ok {
		return
	}
	line, col := position(key)
	e := &Error{File: d.file, Line: line, Column: col, Path: path}
	if line > 0 {
		if d.lines == nil {
			d.lines = splitLines(string(d.src))
		}
		if line <= len(d.lines) {
			e.Source = d.lines[line-1]
		}
	}
	d.keys[path] = e
}
