package api

import (
	"encoding/json"
	"testing"
)

// A SizeSpec crosses JSON (the backend plugin protocol) as it went in:
// written in the configuration grammar, read back from it or from bytes.
func TestSizeSpecJSONRoundTrip(t *testing.T) {
	for _, s := range []SizeSpec{SizeSpec(10 * GB), SizeSpec(512 * MB), SizeSpec(3)} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back SizeSpec
		if err := json.Unmarshal(b, &back); err != nil || back != s {
			t.Fatalf("%s: %s read back as %v (%v)", s, b, back, err)
		}
	}
	var n SizeSpec
	if err := json.Unmarshal([]byte("1024"), &n); err != nil || n != 1024 {
		t.Fatalf("bytes: %v %v", n, err)
	}
	if err := json.Unmarshal([]byte(`"lots"`), &n); err == nil {
		t.Fatal("a size that is no size was read")
	}
}
