package daemon

import (
	"testing"
	"time"

	"gpud.dev/gpud/store"
)

// TestSpecCacheKeepsEachTagsDecodingOfARecord: decodings of one record
// under different tags (a run read as its Spec, by the gateway, by the
// model routes) live side by side, so reading them in turn decodes each
// once per record version, not once per read.
func TestSpecCacheKeepsEachTagsDecodingOfARecord(t *testing.T) {
	var c specCache
	decodes := map[string]int{}
	dec := func(tag string) func(store.Record) (string, error) {
		return func(store.Record) (string, error) { decodes[tag]++; return tag, nil }
	}
	r := store.Record{Kind: store.KindRun, ID: "r1", Version: 1, UpdatedAt: time.Unix(1, 0)}
	for range 3 {
		for _, tag := range []string{"", "gateway", "model"} {
			if v, _, err := cachedOf(&c, r, tag, dec(tag)); err != nil || v != tag {
				t.Fatalf("tag %q: %q %v", tag, v, err)
			}
		}
	}
	for _, tag := range []string{"", "gateway", "model"} {
		if decodes[tag] != 1 {
			t.Errorf("tag %q decoded %d times for one version, want 1", tag, decodes[tag])
		}
	}
	r.Version = 2
	if _, fresh, _ := cachedOf(&c, r, "gateway", dec("gateway")); !fresh || decodes["gateway"] != 2 {
		t.Errorf("a new version was not decoded again: fresh %v, %d decodes", fresh, decodes["gateway"])
	}
}
