package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
)

// NewToken returns a fresh random API token (32 bytes, base64url). Only its
// HashToken is stored; the token itself is shown once to the user.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// HashToken returns the hex SHA-256 of token, the form stored in
// Record.TokenHash. Tokens are 256-bit random, so a plain hash suffices.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// UserByToken returns the user whose token is token, or ErrNotFound.
func (s *Store) UserByToken(token string) (Record, error) {
	recs := s.Users().by(byTokenHash, HashToken(token))
	if len(recs) != 1 {
		return Record{}, fmt.Errorf("user by token: %w", ErrNotFound)
	}
	return recs[0], nil
}

// MemberID is the ID of user's membership record in project.
func MemberID(project, user string) string { return project + "/" + user }
