package api

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size is an amount of memory or disk in bytes. Units are binary, as in
// dstack: 1GB = 1024 MB = 1024³ bytes.
type Size int64

// Size units.
const (
	MB Size = 1 << 20
	GB Size = 1 << 30
	TB Size = 1 << 40
)

// ParseSize reads a size such as "512MB", "80GB", "1.5TB" or a bare number,
// which means gigabytes ("24" is 24GB). Units are case-insensitive; "GiB"
// style suffixes are accepted as synonyms.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty size: write a number with a unit, like 24GB or 512MB")
	}
	upper := strings.ToUpper(t)
	unit := GB
	for _, u := range []struct {
		suffix string
		size   Size
	}{{"TIB", TB}, {"GIB", GB}, {"MIB", MB}, {"TB", TB}, {"GB", GB}, {"MB", MB}} {
		if strings.HasSuffix(upper, u.suffix) {
			unit = u.size
			upper = strings.TrimSpace(strings.TrimSuffix(upper, u.suffix))
			break
		}
	}
	f, err := strconv.ParseFloat(upper, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a size: write a number with a unit, like 24GB, 512MB or 1TB", s)
	}
	if f < 0 {
		return 0, fmt.Errorf("%q: a size cannot be negative", s)
	}
	b := f * float64(unit)
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q: size is too large", s)
	}
	return Size(math.Round(b)), nil
}

// String formats the size in the largest unit that keeps it readable:
// "80GB", "512MB", "1.5TB". ParseSize(s.String()) gives s back for sizes
// that are whole megabytes.
func (s Size) String() string {
	switch {
	case s != 0 && s%TB == 0:
		return strconv.FormatInt(int64(s/TB), 10) + "TB"
	case s >= TB:
		return strconv.FormatFloat(float64(s)/float64(TB), 'f', -1, 64) + "TB"
	case s != 0 && s%GB == 0, s >= GB:
		if s%GB == 0 {
			return strconv.FormatInt(int64(s/GB), 10) + "GB"
		}
		if s%MB == 0 {
			return strconv.FormatInt(int64(s/MB), 10) + "MB"
		}
		return strconv.FormatFloat(float64(s)/float64(GB), 'f', -1, 64) + "GB"
	default:
		return strconv.FormatFloat(float64(s)/float64(MB), 'f', -1, 64) + "MB"
	}
}

// GiB returns the size in (binary) gigabytes.
func (s Size) GiB() float64 { return float64(s) / float64(GB) }

// ParseDuration reads a duration such as "30s", "5m", "1h", "3d", "1w",
// a combination Go understands ("1h30m"), or a bare number of seconds.
// It does not accept "off"; callers that allow it check for it first.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	if t == "" {
		return 0, fmt.Errorf("empty duration: write a number with a unit, like 30s, 5m, 1h, 3d or 1w")
	}
	// A bare number is seconds; only try it when the text ends in a digit,
	// so "15s" does not pay for a failed ParseInt.
	if c := t[len(t)-1]; c >= '0' && c <= '9' {
		if n, err := strconv.ParseInt(t, 10, 64); err == nil {
			if n < 0 {
				return 0, fmt.Errorf("%q: a duration cannot be negative", s)
			}
			return time.Duration(n) * time.Second, nil
		}
	}
	for _, u := range []struct {
		suffix string
		unit   time.Duration
	}{{"w", 7 * 24 * time.Hour}, {"d", 24 * time.Hour}} {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			n, err := strconv.ParseFloat(rest, 64)
			if err != nil || n < 0 || math.IsNaN(n) || n > 1e5 {
				break
			}
			return time.Duration(n * float64(u.unit)), nil
		}
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: write a number with a unit, like 30s, 5m, 1h, 3d or 1w", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q: a duration cannot be negative", s)
	}
	return d, nil
}

// FormatDuration writes d the way ParseDuration reads it, preferring whole
// weeks, days, hours, minutes or seconds ("3d", "90m" stays "90m").
func FormatDuration(d time.Duration) string {
	for _, u := range []struct {
		suffix string
		unit   time.Duration
	}{{"w", 7 * 24 * time.Hour}, {"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}} {
		if d != 0 && d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.suffix
		}
	}
	if d == 0 {
		return "0s"
	}
	return d.String()
}

// Range is an inclusive range of values: "2", "1..8", "2..", "..4".
// A nil bound is open.
type Range[T cmp.Ordered] struct {
	Min *T `json:"min,omitempty"`
	Max *T `json:"max,omitempty"`
}

// ParseRange reads "N", "a..b", "a.." or "..b", parsing each bound with one.
// It rejects "..", an empty string and a minimum above the maximum.
func ParseRange[T cmp.Ordered](s string, one func(string) (T, error)) (Range[T], error) {
	t := strings.TrimSpace(s)
	lo, hi, isRange := strings.Cut(t, "..")
	if !isRange {
		v, err := one(t)
		if err != nil {
			return Range[T]{}, err
		}
		return Range[T]{Min: &v, Max: &v}, nil
	}
	lo, hi = strings.TrimSpace(lo), strings.TrimSpace(hi)
	if lo == "" && hi == "" {
		return Range[T]{}, fmt.Errorf("%q: a range needs at least one bound, like 1..8, 2.. or ..4", s)
	}
	var r Range[T]
	if lo != "" {
		v, err := one(lo)
		if err != nil {
			return Range[T]{}, err
		}
		r.Min = &v
	}
	if hi != "" {
		v, err := one(hi)
		if err != nil {
			return Range[T]{}, err
		}
		r.Max = &v
	}
	if r.Min != nil && r.Max != nil && *r.Min > *r.Max {
		return Range[T]{}, fmt.Errorf("%q: the minimum is above the maximum", s)
	}
	return r, nil
}

// Contains reports whether v lies within the range.
func (r Range[T]) Contains(v T) bool {
	return (r.Min == nil || v >= *r.Min) && (r.Max == nil || v <= *r.Max)
}

// Format writes the range the way ParseRange reads it, formatting each bound with one.
func (r Range[T]) Format(one func(T) string) string {
	switch {
	case r.Min != nil && r.Max != nil && *r.Min == *r.Max:
		return one(*r.Min)
	case r.Min != nil && r.Max != nil:
		return one(*r.Min) + ".." + one(*r.Max)
	case r.Min != nil:
		return one(*r.Min) + ".."
	case r.Max != nil:
		return ".." + one(*r.Max)
	}
	return ".."
}
