package scenario

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// CheckRun compares a run with the scenario's expectations: each
// expect_cycles entry with the state after that cycle (its lines start
// expect_cycles.N), then expect: with the state after the last cycle.
func CheckRun(s *Scenario, res Result) []string {
	var diffs []string
	for _, n := range sortedInts(s.ExpectCycles) {
		if n < 1 || n > len(res.Cycles) {
			diffs = append(diffs, fmt.Sprintf("expect_cycles.%d: the run has %d cycles", n, len(res.Cycles)))
			continue
		}
		checkState(fmt.Sprintf("expect_cycles.%d", n), s.ExpectCycles[n], res.Cycles[n-1], &diffs)
	}
	return append(diffs, Check(s, res.Final)...)
}

// Check compares the state with the scenario's expect: block and returns
// one line per difference. Maps match partially (keys the expectation
// leaves out are not checked); lists must have the same length and match
// element by element; numbers match within 0.001.
func Check(s *Scenario, st State) []string {
	if s.Expect == nil {
		return nil
	}
	var diffs []string
	checkState("expect", s.Expect, st, &diffs)
	return diffs
}

// checkState matches one expectation against a state in its JSON form.
func checkState(path string, want any, st State, diffs *[]string) {
	data, err := json.Marshal(st)
	if err != nil {
		*diffs = append(*diffs, fmt.Sprintf("encode state: %v", err))
		return
	}
	var got any
	if err := json.Unmarshal(data, &got); err != nil {
		*diffs = append(*diffs, fmt.Sprintf("decode state: %v", err))
		return
	}
	match(path, want, got, diffs)
}

func match(path string, want, got any, diffs *[]string) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: want a map, got %v", path, show(got)))
			return
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			gv, ok := g[k]
			if !ok {
				if w[k] == nil {
					continue // expecting absence
				}
				*diffs = append(*diffs, fmt.Sprintf("%s.%s: missing, want %v", path, k, show(w[k])))
				continue
			}
			match(path+"."+k, w[k], gv, diffs)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			*diffs = append(*diffs, fmt.Sprintf("%s: want %d items, got %v", path, len(w), show(got)))
			return
		}
		for i := range w {
			match(fmt.Sprintf("%s[%d]", path, i), w[i], g[i], diffs)
		}
	case nil:
		if got != nil {
			*diffs = append(*diffs, fmt.Sprintf("%s: want nothing, got %v", path, show(got)))
		}
	default:
		if wf, ok := number(want); ok {
			gf, ok := got.(float64)
			if !ok || math.Abs(wf-gf) > 0.001 {
				*diffs = append(*diffs, fmt.Sprintf("%s: want %v, got %v", path, wf, show(got)))
			}
			return
		}
		if fmt.Sprint(want) != fmt.Sprint(got) {
			*diffs = append(*diffs, fmt.Sprintf("%s: want %q, got %v", path, fmt.Sprint(want), show(got)))
		}
	}
}

func show(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}
