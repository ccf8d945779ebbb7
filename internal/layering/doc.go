// Package layering holds no code: its test checks, with `go list -deps`,
// that every gpud package imports only what docs/ARCHITECTURE.md §2
// allows, so a forbidden import arrow fails the build's tests instead of
// waiting for a reviewer to notice it.
package layering
