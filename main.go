// Command gpud is one binary with three roles: the server (gpud serve), the
// host agent (gpud agent) and the client commands (gpud run, validate, ...).
// Everything lives in package cli and below; main only hands over.
package main

import (
	"os"

	"gpud.dev/gpud/cli"
)

func main() {
	os.Exit(cli.Main(os.Args))
}
