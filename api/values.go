package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// SizeSpec is a size as a configuration writes it: JSON carries it in the
// configuration grammar ("80GB"), where Size itself travels as a number of
// bytes in the wire types.
type SizeSpec Size

// Bytes returns the size.
func (s SizeSpec) Bytes() Size { return Size(s) }

// String writes the size the way ParseSize reads it.
func (s SizeSpec) String() string { return Size(s).String() }

// MarshalJSON writes String as a JSON string.
func (s SizeSpec) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads what MarshalJSON writes (or a number of bytes), so
// a spec with sizes crosses the backend plugin protocol (JSON) intact.
func (s *SizeSpec) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("a size: %w", err)
		}
		*s = SizeSpec(n)
		return nil
	}
	v, err := ParseSize(str)
	if err != nil {
		return err
	}
	*s = SizeSpec(v)
	return nil
}

// MarshalJSON writes the range the way ParseRange reads it ("1..8", "2..",
// "80GB"); a range with no bound is null.
func (r Range[T]) MarshalJSON() ([]byte, error) {
	if r.Min == nil && r.Max == nil {
		return []byte("null"), nil
	}
	return json.Marshal(r.Format(formatOne[T]))
}

// UnmarshalJSON reads a range string, a single number, or {"min", "max"}.
func (r *Range[T]) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*r = Range[T]{}
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		var obj struct {
			Min *T `json:"min"`
			Max *T `json:"max"`
		}
		if err := json.Unmarshal(b, &obj); err == nil {
			*r = Range[T]{Min: obj.Min, Max: obj.Max}
			return nil
		}
		str = string(b)
	}
	v, err := ParseRange(str, parseOne[T])
	if err != nil {
		return fmt.Errorf("range: %w", err)
	}
	*r = v
	return nil
}

// parseOne reads one bound of a range of the kinds the configuration uses.
func parseOne[T cmp.Ordered](s string) (T, error) {
	var zero T
	var v any
	var err error
	switch any(zero).(type) {
	case int:
		var n int
		n, err = strconv.Atoi(strings.TrimSpace(s))
		if err == nil && n < 0 {
			err = fmt.Errorf("%q: a count cannot be negative", s)
		}
		if err != nil && !strings.Contains(err.Error(), "negative") {
			err = fmt.Errorf("%q is not a whole number: write a count like 2, or a range like 1..8", s)
		}
		v = n
	case Size:
		v, err = ParseSize(s)
	case float64:
		var f float64
		f, err = strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || f < 0 || f != f || f > 1e15 {
			err = fmt.Errorf("%q is not a number: write a number like 0.5 or 2", s)
		}
		v = f
	case time.Duration:
		v, err = ParseDuration(s)
	default:
		return zero, fmt.Errorf("unsupported range type %T", zero)
	}
	if err != nil {
		return zero, err
	}
	return v.(T), nil
}

func formatOne[T cmp.Ordered](v T) string {
	switch x := any(v).(type) {
	case Size:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case time.Duration:
		return FormatDuration(x)
	}
	return fmt.Sprint(v)
}

// Exact returns the range holding only v.
func Exact[T cmp.Ordered](v T) Range[T] { return Range[T]{Min: &v, Max: &v} }

// AtLeast returns the open range "v..".
func AtLeast[T cmp.Ordered](v T) Range[T] { return Range[T]{Min: &v} }

// IsZero reports whether the range has no bound at all (it was not set).
func (r Range[T]) IsZero() bool { return r.Min == nil && r.Max == nil }

// Duration is a length of time that may also be "off" (disabled), as dstack
// allows for max_duration, idle_duration and similar fields.
type Duration struct {
	Value time.Duration
	Off   bool
}

// String writes the duration the way the configuration reads it: "off", "5m".
func (d Duration) String() string {
	if d.Off {
		return "off"
	}
	return FormatDuration(d.Value)
}

// MarshalJSON writes String as a JSON string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads "off", a duration string or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		s = string(b)
	}
	v, err := parseDurationOrOff(s, true)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

func parseDurationOrOff(s string, allowOff bool) (Duration, error) {
	if strings.EqualFold(strings.TrimSpace(s), "off") {
		if !allowOff {
			return Duration{}, fmt.Errorf("%q is not allowed here: write a duration like 30s, 5m, 1h or 3d", s)
		}
		return Duration{Off: true}, nil
	}
	v, err := ParseDuration(s)
	if err != nil {
		return Duration{}, err
	}
	return Duration{Value: v}, nil
}

// duration reads a duration field; allowOff accepts "off" (and false).
func (d *decoder) duration(n ast.Node, path string, allowOff bool) *Duration {
	r := d.resolve(n, path)
	if r == nil || isNull(r) {
		return nil
	}
	if b, ok := r.(*ast.BoolNode); ok && allowOff && !b.Value {
		return &Duration{Off: true}
	}
	v, ok := value(d, r, path, func(s string) (Duration, error) { return parseDurationOrOff(s, allowOff) })
	if !ok {
		return nil
	}
	return &v
}

// countRange reads a count or a range of counts: 2, "1..8", "2..", "..4".
func (d *decoder) countRange(n ast.Node, path string) (Range[int], bool) {
	return value(d, n, path, func(s string) (Range[int], error) { return ParseRange(s, parseOne[int]) })
}

// sizeRange reads a size or a range of sizes: "24GB", "24GB..80GB", "100GB..".
func (d *decoder) sizeRange(n ast.Node, path string) (Range[Size], bool) {
	return value(d, n, path, func(s string) (Range[Size], error) { return ParseRange(s, ParseSize) })
}

// size reads one size.
func (d *decoder) size(n ast.Node, path string) (SizeSpec, bool) {
	v, ok := value(d, n, path, ParseSize)
	return SizeSpec(v), ok
}
