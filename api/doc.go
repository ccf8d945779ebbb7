// Package api owns gpud's configuration language and wire types: it turns
// YAML configurations (dstack's format plus gpud's extensions) into typed,
// validated specs with file:line:col errors, defines the JSON shapes the
// server and the agent exchange, and provides the Go HTTP client.
//
// api is shared by the client and the server, so it must not import any
// other gpud package.
package api
