package store

import (
	"errors"
	"fmt"
	"io/fs"
)

// Errors returned by the store; test them with errors.Is.
var (
	// ErrNotFound reports a missing record or key. It wraps fs.ErrNotExist so
	// that certmagic and other io/fs-style callers recognize it.
	ErrNotFound = fmt.Errorf("store: not found: %w", fs.ErrNotExist)
	// ErrConflict reports a compare-and-set whose expected version did not
	// match the stored one; the whole Apply call that held it was rejected.
	ErrConflict = errors.New("store: version conflict")
	// ErrExists reports a Create of a record that already exists.
	ErrExists = errors.New("store: record already exists")
	// ErrClosed reports a call on a closed store.
	ErrClosed = errors.New("store: closed")
	// ErrLocked reports that another process holds the state file.
	ErrLocked = errors.New("store: state file is held by another process")
	// ErrInvalid reports a malformed record, key or mutation.
	ErrInvalid = errors.New("store: invalid")
)

// ConflictError says which record failed a compare-and-set; it matches
// ErrConflict with errors.Is.
type ConflictError struct {
	Kind Kind
	ID   string
	Want uint64 // the version the caller expected
	Have uint64 // the stored version (0: absent)
}

// Error names the record and both versions.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("store: %s %q: expected version %d, stored version is %d", e.Kind, e.ID, e.Want, e.Have)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

func errorNotFound(k Kind, id string) error {
	return fmt.Errorf("%s %q: %w", k, id, ErrNotFound)
}
