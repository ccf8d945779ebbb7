package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// recordFormat is the first byte of every record value written by this
// schema: it lets a later schema change the encoding without guessing.
// Layout: [recordFormat][uvarint len(sealed)][sealed][compact JSON]. The
// sealed envelope is stored raw (not base64 inside the JSON), so what is on
// disk is exactly the ciphertext — or, in plaintext mode, the plaintext.
const recordFormat byte = 2

// diskRecord is a Record as stored: timestamps as Unix nanoseconds and the
// secret material already sealed.
type diskRecord struct {
	ID        string          `json:"id"`
	Project   string          `json:"p,omitempty"`
	Name      string          `json:"n,omitempty"`
	Status    string          `json:"s,omitempty"`
	Queue     string          `json:"q,omitempty"`
	Fleet     string          `json:"f,omitempty"`
	Instance  string          `json:"i,omitempty"`
	Run       string          `json:"r,omitempty"`
	User      string          `json:"u,omitempty"`
	Role      string          `json:"ro,omitempty"`
	TokenHash string          `json:"th,omitempty"`
	Reason    string          `json:"why,omitempty"`
	Version   uint64          `json:"v"`
	Created   int64           `json:"c"`
	Updated   int64           `json:"m"`
	Spec      json.RawMessage `json:"spec,omitempty"`
}

// encodeRecord turns r into its stored bytes; sealed is r.Sealed already
// passed through the keyring (nil when r has no secret material).
func encodeRecord(r *Record, sealed []byte) ([]byte, error) {
	d := diskRecord{
		ID: r.ID, Project: r.Project, Name: r.Name, Status: r.Status, Queue: r.Queue, Fleet: r.Fleet,
		Instance: r.Instance, Run: r.Run, User: r.User, Role: r.Role, TokenHash: r.TokenHash,
		Reason: r.Reason, Version: r.Version, Created: r.CreatedAt.UnixNano(), Updated: r.UpdatedAt.UnixNano(),
		Spec: r.Spec,
	}
	b, err := json.Marshal(&d)
	if err != nil {
		return nil, fmt.Errorf("encode %s %q: %w", r.Kind, r.ID, err)
	}
	out := make([]byte, 0, 1+binary.MaxVarintLen64+len(sealed)+len(b))
	out = append(out, recordFormat)
	out = binary.AppendUvarint(out, uint64(len(sealed)))
	out = append(out, sealed...)
	return append(out, b...), nil
}

// decodeRecord parses stored bytes of kind k. It returns the record with
// Sealed still sealed; the caller opens it with the keyring. It never panics
// on malformed input (see FuzzDecodeRecord).
func decodeRecord(k Kind, b []byte) (Record, error) {
	if len(b) == 0 {
		return Record{}, fmt.Errorf("%w: empty %s record", ErrInvalid, k)
	}
	if b[0] != recordFormat {
		return Record{}, fmt.Errorf("%w: %s record has format %d, want %d", ErrInvalid, k, b[0], recordFormat)
	}
	n, w := binary.Uvarint(b[1:])
	if w <= 0 || n > uint64(len(b)-1-w) {
		return Record{}, fmt.Errorf("%w: %s record has a bad sealed length", ErrInvalid, k)
	}
	var sealed []byte
	if n > 0 {
		sealed = append([]byte(nil), b[1+w:1+w+int(n)]...)
	}
	var d diskRecord
	if err := json.Unmarshal(b[1+w+int(n):], &d); err != nil {
		return Record{}, fmt.Errorf("%w: %s record: %v", ErrInvalid, k, err)
	}
	if d.ID == "" {
		return Record{}, fmt.Errorf("%w: %s record without id", ErrInvalid, k)
	}
	r := Record{
		Kind: k, ID: d.ID, Project: d.Project, Name: d.Name, Status: d.Status, Queue: d.Queue,
		Fleet: d.Fleet, Instance: d.Instance, Run: d.Run, User: d.User, Role: d.Role,
		TokenHash: d.TokenHash, Reason: d.Reason, Version: d.Version,
		CreatedAt: time.Unix(0, d.Created).UTC(), UpdatedAt: time.Unix(0, d.Updated).UTC(),
		Spec: d.Spec, Sealed: sealed,
	}
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
