package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// gatewayCommand lists, applies and deletes a project's gateways, and
// prints the server's internal gateway CA.
func gatewayCommand() *cli.Command {
	return &cli.Command{
		Name:  "gateway",
		Usage: "list, apply and delete gateways (the domains services are served at); print the gateway CA",
		Description: "The server itself is the gateway (gpud serve --domain, docs/gateway.md): a type: gateway\n" +
			"configuration gives a project's services their own domain and certificate mode.",
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
