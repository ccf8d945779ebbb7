package api

import (
	"encoding/json"
	"testing"
	"time"
)

func TestParseSizeUnitsAndBareGigabytes(t *testing.T) {
	tests := map[string]Size{"512MB": 512 * MB, "80GB": 80 * GB, "24": 24 * GB, "1.5TB": 3 * TB / 2, "16gib": 16 * GB, " 2TB ": 2 * TB}
	for in, want := range tests {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, err := ParseSize(got.String()); err != nil || back != got {
			t.Errorf("ParseSize(%q.String()=%q) = %v, %v", in, got.String(), back, err)
		}
	}
	for _, bad := range []string{"", "GB", "-1GB", "lots", "NaN", "1e300TB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func TestParseDurationUnitsAndOff(t *testing.T) {
	tests := map[string]time.Duration{"30s": 30 * time.Second, "5m": 5 * time.Minute, "1h": time.Hour, "3d": 72 * time.Hour, "1w": 168 * time.Hour, "1h30m": 90 * time.Minute, "90": 90 * time.Second}
	for in, want := range tests {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, err := ParseDuration(FormatDuration(got)); err != nil || back != got {
			t.Errorf("FormatDuration round trip of %q: %v, %v", in, back, err)
		}
	}
	for _, bad := range []string{"", "soon", "-5m", "off"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) accepted", bad)
		}
	}
	if d, err := parseDurationOrOff("OFF", true); err != nil || !d.Off || d.String() != "off" {
		t.Errorf("off: %+v, %v", d, err)
	}
}

func TestRangeGrammarAndJSON(t *testing.T) {
	for _, in := range []string{"2", "1..8", "2..", "..4"} {
		r, err := ParseRange(in, parseOne[int])
		if err != nil {
			t.Fatalf("ParseRange(%q): %v", in, err)
		}
		b, err := json.Marshal(r)
		if err != nil || string(b) != `"`+in+`"` {
			t.Errorf("json of %q = %s, %v", in, b, err)
		}
		var back Range[int]
		if err := json.Unmarshal(b, &back); err != nil || back.Format(formatOne[int]) != in {
			t.Errorf("unmarshal %s = %v, %v", b, back, err)
		}
	}
	var obj Range[Size]
	if err := json.Unmarshal([]byte(`{"min": 1073741824}`), &obj); err != nil || obj.Format(formatOne[Size]) != "1GB.." {
		t.Errorf("object form: %v, %v", obj, err)
	}
	for _, bad := range []string{"..", "", "8..2", "-1", "x..y"} {
		if _, err := ParseRange(bad, parseOne[int]); err == nil {
			t.Errorf("ParseRange(%q) accepted", bad)
		}
	}
	if !AtLeast(3).Contains(5) || Exact(3).Contains(4) {
		t.Error("Contains is wrong")
	}
}
