// Package e2e holds the end-to-end tests of the gpud CLI: they build the
// gpud binary once, then run it as a user would — `gpud run` on the
// embedded default, `gpud serve` with login, apply, ps, logs, stop and
// queue list — against a real Docker engine and real processes.
//
// e2e has no non-test code and imports only api and internal/testutil:
// everything else is reached through the binary.
package e2e
