package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// offerCommand lists idle capacity matching resources.
func offerCommand() *cli.Command {
	return &cli.Command{
		Name:  "offer",
		Usage: "list capacity a run could get now, best first",
		Flags: clientFlags(
			&cli.StringFlag{Name: "gpu", Usage: "GPUs, as in a configuration: H100:2, A100:40GB:1..2, 0.5"},
			&cli.StringFlag{Name: "cpu", Usage: "CPU cores: 4, 4.."},
			&cli.StringFlag{Name: "memory", Usage: "memory: 16GB.."},
			&cli.StringFlag{Name: "group-by", Usage: "group offers by any of gpu,backend,region: one row per group with its count and price range"},
			jsonFlag(),
		),
		Action: func(c *cli.Context) error {
			if err := checkGroupBy(c.String("group-by")); err != nil {
				return err
			}
			cl, t, err := connect(c)
			if err != nil {
				return err
			}
			offers, err := cl.Offers(c.Context, t.Project, api.OfferQuery{GPU: c.String("gpu"), CPU: c.String("cpu"), Memory: c.String("memory")})
			if err != nil {
				return fmt.Errorf("offer: %w", err)
			}
			if g := c.String("group-by"); g != "" {
				return printOfferGroups(c, offers, g)
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, offers)
			}
			if len(offers) == 0 {
				fmt.Fprintln(c.App.Writer, "no offers match")
				return nil
			}
			tb := newTable(c.App.Writer, "#", "BACKEND", "FLEET", "INSTANCE", "RESOURCES", "REGION", "PRICE", "AVAILABILITY")
			for i, o := range offers {
				tb.row(fmt.Sprint(i+1), o.Backend, orDash(o.Fleet), orDash(o.Instance), instanceResources(o.Resources), orDash(o.Region), offerPrice(o), orDash(o.Available))
			}
			return tb.flush()
		},
	}
}
