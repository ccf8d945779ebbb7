package cli

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/caddyserver/certmagic"
	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/proxy"
)

// gatewayCommand lists, applies and deletes a project's gateways, and
// prints the server's internal gateway CA.
func gatewayCommand() *cli.Command {
	return &cli.Command{
		Name:  "gateway",
		Usage: "list, apply and delete gateways (the domains services are served at); print the gateway CA",
		Description: "The server itself is the gateway (gpud serve --domain, docs/gateway.md): a type: gateway\n" +
			"configuration gives a project's services their own domain and certificate mode.\n" +
			"With --server, this command runs a standalone gateway on a public host instead: it terminates\n" +
			"TLS for the services of the token's projects and forwards each request to the server.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "server", Usage: "run a standalone gateway for the gpud server at this URL"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"GPUD_GATEWAY_TOKEN"}, Usage: "a token of the server (a member of the projects whose services this gateway serves); prefer $GPUD_GATEWAY_TOKEN to keep it out of ps"},
			&cli.StringFlag{Name: "server-ca", Usage: "PEM file of the CA that signed the server's certificate (default: the system's roots)"},
			&cli.StringFlag{Name: "data-dir", Usage: "where the gateway keeps its certificates (default ~/.gpud/gateway)"},
			&cli.StringFlag{Name: "https-listen", Value: ":443", Usage: "HTTPS address"},
			&cli.StringFlag{Name: "http-listen", Value: ":80", Usage: "plain-HTTP address: ACME HTTP-01 and redirects to HTTPS"},
			&cli.StringFlag{Name: "tls", Value: "acme", Usage: "certificates: acme, internal (a CA of the gateway's own, in DATA_DIR) or none"},
			&cli.StringFlag{Name: "acme-ca", Value: proxy.LetsEncryptCA, Usage: "ACME directory URL"},
			&cli.StringFlag{Name: "acme-email", Usage: "contact address of the ACME account"},
			&cli.StringFlag{Name: "acme-ca-root", Usage: "PEM file of the root the ACME directory's own HTTPS chains to"},
		},
		Action: runStandaloneGateway,
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the project's gateways: domain, default, certificate, where services are",
				Flags: clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					gs, err := cl.ListGateways(c.Context, t.Project)
					if err != nil {
						return serverError("gateway list", err, c.App.ErrWriter)
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, gs)
					}
					return printGateways(c.App.Writer, gs)
				},
			},
			{
				Name:      "apply",
				Usage:     "create or update gateways from type: gateway files (same as gpud apply)",
				ArgsUsage: "FILE...",
				Flags:     clientFlags(jsonFlag()),
				Action:    runApply,
			},
			{
				Name:      "delete",
				Usage:     "delete gateways; their services fall back to the server's own domain",
				ArgsUsage: "GATEWAY...",
				Flags:     clientFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() == 0 {
						return usageError(fmt.Errorf("gateway delete: give at least one gateway name"))
					}
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					for _, g := range c.Args().Slice() {
						if err := cl.DeleteGateway(c.Context, t.Project, g); err != nil {
							return serverError("gateway delete "+g, err, c.App.ErrWriter)
						}
						fmt.Fprintf(c.App.Writer, "gateway %s deleted\n", g)
					}
					return nil
				},
			},
			{
				Name:  "ca",
				Usage: "print (or write with --out) the CA certificate of a server started with --tls internal, for clients to trust",
				Flags: clientFlags(&cli.StringFlag{Name: "out", Usage: "write the PEM to this file instead of printing it"}),
				Action: func(c *cli.Context) error {
					cl, _, err := connect(c)
					if err != nil {
						return err
					}
					pem, err := cl.GatewayCA(c.Context)
					if err != nil {
						return fmt.Errorf("gateway ca: %w", err)
					}
					if out := c.String("out"); out != "" {
						if err := os.WriteFile(out, pem, 0o644); err != nil {
							return fmt.Errorf("gateway ca: %w", err)
						}
						fmt.Fprintf(c.App.Writer, "wrote %s\n", out)
						return nil
					}
					_, err = c.App.Writer.Write(pem)
					return err
				},
			},
		},
	}
}

// printGateways writes one row per gateway.
func printGateways(w io.Writer, gs []api.Gateway) error {
	if len(gs) == 0 {
		fmt.Fprintln(w, "no gateways")
		return nil
	}
	t := newTable(w, "NAME", "DOMAIN", "DEFAULT", "CERTIFICATE", "SERVICES AT", "LISTENING")
	for _, g := range gs {
		t.row(g.Name, g.Domain, fmt.Sprint(g.Default), g.Certificate, g.ServiceURL, fmt.Sprint(g.Listening))
	}
	return t.flush()
}

// checkGatewayFlags refuses gateway flags that would not take effect: the
// certificate flags without a gateway listener, the ACME flags with
// another certificate mode.
func checkGatewayFlags(c *cli.Context) error {
	gateway := c.String("domain") != "" || c.String("https-listen") != "" || c.String("http-listen") != ""
	for _, f := range []string{"tls", "acme-ca", "acme-email", "acme-ca-root"} {
		if c.IsSet(f) && !gateway {
			return usageError(fmt.Errorf("serve: --%s needs the gateway: add --domain (docs/gateway.md)", f))
		}
	}
	switch mode := c.String("tls"); mode {
	case "acme":
	case "internal", "none":
		for _, f := range []string{"acme-ca", "acme-email", "acme-ca-root"} {
			if c.IsSet(f) {
				return usageError(fmt.Errorf("serve: --%s is for --tls acme, not --tls %s", f, mode))
			}
		}
	default:
		return usageError(fmt.Errorf("serve: --tls %q: use acme, internal or none", mode))
	}
	return nil
}

// runStandaloneGateway is `gpud gateway --server URL`: a public host that
// terminates TLS for the server's services (those of the token's
// projects) and forwards each request to the server, until SIGINT or
// SIGTERM.
func runStandaloneGateway(c *cli.Context) error {
	if c.String("server") == "" {
		return usageError(fmt.Errorf("gateway: give a subcommand (list, apply, delete, ca), or --server URL to run a standalone gateway"))
	}
	if c.String("token") == "" {
		return usageError(fmt.Errorf("gateway --server: give the server's token in $GPUD_GATEWAY_TOKEN (or --token)"))
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if f := c.String("server-ca"); f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return invalidInputf("gateway --server-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return invalidInputf("gateway --server-ca %s: no PEM certificate in it", f)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	cl, err := api.NewClient(c.String("server"), c.String("token"), &http.Client{Transport: transport})
	if err != nil {
		return usageError(fmt.Errorf("gateway --server: %w", err))
	}
	if _, err := cl.WhoAmI(c.Context); err != nil {
		return serverError("gateway --server", err, c.App.ErrWriter)
	}
	dir := c.String("data-dir")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("gateway: data dir: %w", err)
		}
		dir = filepath.Join(home, ".gpud", "gateway")
	}
	opts := proxy.StandaloneOptions{Server: cl, Transport: transport, HTTPSListen: c.String("https-listen"), HTTPListen: c.String("http-listen"),
		Storage: &certmagic.FileStorage{Path: filepath.Join(dir, "certs")}, Log: *zerolog.Ctx(c.Context)}
	switch mode := c.String("tls"); mode {
	case "acme":
		opts.Source, opts.CA, opts.Email = proxy.CertACME, c.String("acme-ca"), c.String("acme-email")
		if f := c.String("acme-ca-root"); f != "" {
			pem, err := os.ReadFile(f)
			if err != nil {
				return invalidInputf("gateway --acme-ca-root: %w", err)
			}
			opts.CARoots = x509.NewCertPool()
			if !opts.CARoots.AppendCertsFromPEM(pem) {
				return invalidInputf("gateway --acme-ca-root %s: no PEM certificate in it", f)
			}
		}
	case "internal":
		opts.Source = proxy.CertInternal
	case "none":
	default:
		return usageError(fmt.Errorf("gateway --tls %q: use acme, internal or none", mode))
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	g, err := proxy.NewStandalone(ctx, opts)
	if err != nil {
		return err
	}
	if ca := g.CACertPEM(); ca != nil {
		f := filepath.Join(dir, "gateway-ca.pem")
		if err := os.WriteFile(f, ca, 0o644); err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		fmt.Fprintf(c.App.Writer, "Clients trust the gateway's CA in %s\n", f)
	}
	fmt.Fprintf(c.App.Writer, "gateway for %s: https on %s, http on %s\n", cl.BaseURL(), orDash(g.HTTPSAddr()), g.HTTPAddr())
	return g.Serve(ctx)
}
