package daemon

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"
)

// EmbeddedOptions configure the in-process server of `gpud run` when no
// server is configured.
type EmbeddedOptions struct {
	// DataDir holds the embedded server's state (default ~/.gpud/server).
	DataDir string
	// FakeGPUs gives the local agent a fake inventory (tests).
	FakeGPUs string
	Logger   zerolog.Logger
}

// StartEmbedded starts a server on 127.0.0.1:0 with an in-process local
// agent in the laptop mode (Options.Embedded): image-less runs execute as
// processes of the invoking user, each in a working directory of its own,
// and runs with an image in Docker when it is reachable. It serves until
// ctx ends or Close is called. It returns the server, its
// base URL and an admin token valid until the next start. Runs go to
// project DefaultProject.
func StartEmbedded(ctx context.Context, opts EmbeddedOptions) (*Server, string, string, error) {
	srv, err := New(ctx, Options{
		DataDir:          opts.DataDir,
		Listen:           "127.0.0.1:0",
		FakeGPUs:         opts.FakeGPUs,
		RotateAdminToken: true,
		Embedded:         true,
		Logger:           opts.Logger,
	})
	if err != nil {
		return nil, "", "", fmt.Errorf("embedded server: %w", err)
	}
	go func() {
		// gpud run sees the server stop as failed requests; the log says why.
		if err := srv.Run(ctx); err != nil {
			opts.Logger.Error().Err(err).Msg("embedded server stopped")
		}
	}()
	return srv, srv.URL(), srv.AdminToken(), nil
}
