package store

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder: it must
// never panic, and whatever it accepts must re-encode to a value that
// decodes to the same record.
func FuzzDecodeRecord(f *testing.F) {
	good, _ := encodeRecord(&Record{Kind: KindJob, ID: "j1", Project: "p", Status: JobRunning, Version: 3,
		CreatedAt: time.Unix(1, 0), UpdatedAt: time.Unix(2, 0), Spec: []byte(`{"gpu":1}`)}, []byte{1, 3, 'a', 'b', 'c'})
	f.Add(good)
	f.Add([]byte{recordFormat})
	f.Add([]byte{recordFormat, 0, '{', '}'})
	f.Add([]byte{recordFormat, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte(`{"id":"v1-style"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(KindJob, b)
		if err != nil {
			return
		}
		sealed := r.Sealed
		again, err := encodeRecord(&r, sealed)
		if err != nil {
			t.Fatalf("accepted record does not re-encode: %v", err)
		}
		r2, err := decodeRecord(KindJob, again)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !sameContent(&r, &r2) || r.Version != r2.Version || !r.CreatedAt.Equal(r2.CreatedAt) {
			t.Fatalf("round trip changed the record: %+v -> %+v", r, r2)
		}
	})
}

// FuzzOpenSealed feeds arbitrary envelopes to the keyring: never a panic,
// and nothing opens unless it was sealed by the ring for that record.
func FuzzOpenSealed(f *testing.F) {
	k, err := LoadKeyring(filepath.Join(f.TempDir(), "k"), "")
	if err != nil {
		f.Fatal(err)
	}
	s, _ := k.seal([]byte("x"), recordAAD(KindSecret, "a"))
	f.Add(s)
	f.Add([]byte{sealAESv1, 200})
	f.Add([]byte{sealPlain, 'h', 'i'})
	f.Fuzz(func(t *testing.T, b []byte) {
		pt, err := k.open(b, recordAAD(KindSecret, "a"))
		if err == nil && len(b) > 0 && b[0] == sealAESv1 && string(pt) != "x" {
			t.Fatalf("forged envelope opened to %q", pt)
		}
	})
}

// FuzzKVKey feeds arbitrary keys to the key-value path rules: accepted keys
// are canonical (cleaning them again changes nothing), have no empty, "."
// or ".." segment, and never start or end with a slash.
func FuzzKVKey(f *testing.F) {
	for _, k := range []string{"certs/a.com/a.key", "/a/", "a//b", "../x", "a/./b", "", "/", "a\\b", "acme/ünïcode/ключ"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		c, err := cleanKey(key)
		if err != nil {
			return
		}
		if again, err := cleanKey(c); err != nil || again != c {
			t.Fatalf("clean(%q) = %q is not canonical: %q %v", key, c, again, err)
		}
		if strings.HasPrefix(c, "/") || strings.HasSuffix(c, "/") {
			t.Fatalf("clean(%q) = %q keeps a slash at an end", key, c)
		}
		for _, seg := range strings.Split(c, "/") {
			if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "\x00\\") {
				t.Fatalf("clean(%q) = %q has segment %q", key, c, seg)
			}
		}
	})
}
