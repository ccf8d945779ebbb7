package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// recordFormat is the first byte of every record value written by schema 2;
// it lets a later schema change the encoding without guessing. The layout,
// chosen so that Open decodes 100,000 records without reflection:
//
//	[recordFormat]
//	uvarint Version, varint CreatedAt, varint UpdatedAt (Unix nanoseconds)
//	12 × (uvarint length, bytes): ID Project Name Status Queue Fleet
//	     Instance Run User Role TokenHash Reason
//	uvarint length, sealed envelope (raw bytes: ciphertext, or plaintext
//	     in plaintext mode)
//	uvarint length, Spec (JSON)
const recordFormat byte = 2

const numStringFields = 12

func stringFields(r *Record) [numStringFields]*string {
	return [numStringFields]*string{&r.ID, &r.Project, &r.Name, &r.Status, &r.Queue, &r.Fleet,
		&r.Instance, &r.Run, &r.User, &r.Role, &r.TokenHash, &r.Reason}
}

// encodeRecord turns r into its stored bytes; sealed is r.Sealed already
// passed through the keyring (nil when r has no secret material).
func encodeRecord(r *Record, sealed []byte) ([]byte, error) {
	n := 1 + 3*binary.MaxVarintLen64 + 2*binary.MaxVarintLen64 + len(sealed) + len(r.Spec)
	fields := stringFields(r)
	for _, f := range fields {
		n += binary.MaxVarintLen64 + len(*f)
	}
	out := make([]byte, 0, n)
	out = append(out, recordFormat)
	out = binary.AppendUvarint(out, r.Version)
	out = binary.AppendVarint(out, r.CreatedAt.UnixNano())
	out = binary.AppendVarint(out, r.UpdatedAt.UnixNano())
	for _, f := range fields {
		out = binary.AppendUvarint(out, uint64(len(*f)))
		out = append(out, *f...)
	}
	out = binary.AppendUvarint(out, uint64(len(sealed)))
	out = append(out, sealed...)
	out = binary.AppendUvarint(out, uint64(len(r.Spec)))
	return append(out, r.Spec...), nil
}

// decodeRecord parses stored bytes of kind k. It returns the record with
// Sealed still sealed; the caller opens it with the keyring. The result
// shares no memory with b (bbolt's pages are only valid inside their
// transaction). It never panics on malformed input (see FuzzDecodeRecord).
func decodeRecord(k Kind, b []byte) (Record, error) {
	bad := func(what string) (Record, error) {
		return Record{}, fmt.Errorf("%w: %s record: %s", ErrInvalid, k, what)
	}
	if len(b) == 0 {
		return bad("empty")
	}
	if b[0] != recordFormat {
		return bad(fmt.Sprintf("format %d, want %d", b[0], recordFormat))
	}
	p := 1
	uv := func() (uint64, bool) {
		v, w := binary.Uvarint(b[p:])
		if w <= 0 {
			return 0, false
		}
		p += w
		return v, true
	}
	sv := func() (int64, bool) {
		v, w := binary.Varint(b[p:])
		if w <= 0 {
			return 0, false
		}
		p += w
		return v, true
	}
	var r Record
	var ok1, ok2, ok3 bool
	var created, updated int64
	r.Version, ok1 = uv()
	created, ok2 = sv()
	updated, ok3 = sv()
	if !ok1 || !ok2 || !ok3 {
		return bad("truncated header")
	}
	// The string fields become substrings of one string, so a record costs
	// one allocation for all of them.
	type span struct{ from, to int }
	var spans [numStringFields]span
	start := p
	for i := range spans {
		n, ok := uv()
		if !ok || n > uint64(len(b)-p) {
			return bad("truncated field")
		}
		spans[i] = span{p - start, p - start + int(n)}
		p += int(n)
	}
	all := string(b[start:p])
	for i, f := range stringFields(&r) {
		*f = all[spans[i].from:spans[i].to]
	}
	for _, dst := range []*[]byte{&r.Sealed, (*[]byte)(&r.Spec)} {
		n, ok := uv()
		if !ok || n > uint64(len(b)-p) {
			return bad("truncated value")
		}
		if n > 0 {
			*dst = append([]byte(nil), b[p:p+int(n)]...)
		}
		p += int(n)
	}
	if p != len(b) {
		return bad("trailing bytes")
	}
	if r.ID == "" {
		return bad("no id")
	}
	r.Kind = k
	r.CreatedAt = time.Unix(0, created).UTC()
	r.UpdatedAt = time.Unix(0, updated).UTC()
	return r, nil
}

// validateRecord checks what the store relies on: a known kind, a usable
// key and a Spec that is JSON.
func validateRecord(r *Record) error {
	if !knownKind(r.Kind) {
		return fmt.Errorf("%w: unknown kind %q", ErrInvalid, r.Kind)
	}
	if err := validateID(r.ID); err != nil {
		return fmt.Errorf("%s: %w", r.Kind, err)
	}
	if len(r.Spec) > 0 && !json.Valid(r.Spec) {
		return fmt.Errorf("%w: %s %q: spec is not valid JSON", ErrInvalid, r.Kind, r.ID)
	}
	return nil
}

func validateID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty id", ErrInvalid)
	}
	if len(id) > 1024 {
		return fmt.Errorf("%w: id longer than 1024 bytes", ErrInvalid)
	}
	for i := 0; i < len(id); i++ {
		if id[i] == 0 {
			return fmt.Errorf("%w: id %q contains a NUL byte", ErrInvalid, id)
		}
	}
	return nil
}
