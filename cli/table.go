package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"gpud.dev/gpud/api"
)

// table writes aligned columns; rows are tab-separated, Flush prints them.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return fmt.Errorf("print table: %w", err)
	}
	return nil
}

// ago formats how long ago ts was, "-" for the zero time.
func ago(now, ts time.Time) string {
	if ts.IsZero() {
		return "-"
	}
	d := now.Sub(ts)
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// orDash returns s, or "-" when s is empty, so table cells never vanish.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanSize formats a byte count for tables: "512MB", "23.5GB", "1.2TB";
// Size.String keeps every digit, which suits configurations, not columns.
func humanSize(s api.Size) string {
	switch {
	case s == 0:
		return "0"
	case s < api.GB:
		return fmt.Sprintf("%.4gMB", float64(s)/float64(api.MB))
	case s < api.TB:
		return fmt.Sprintf("%.4gGB", float64(s)/float64(api.GB))
	}
	return fmt.Sprintf("%.4gTB", float64(s)/float64(api.TB))
}
