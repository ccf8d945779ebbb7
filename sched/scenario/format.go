package scenario

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteText writes the human form of a run: per cycle a table of
// placements, evictions and fair shares, why each job still waits, and
// what the cluster did before the next cycle.
func WriteText(w io.Writer, res Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, p := range res.Plans {
		fmt.Fprintf(tw, "cycle %d: %d placed, %d evicted, %d pending\n", i+1, len(p.Placements), len(p.Evictions), len(p.Pending))
		if len(p.Placements) > 0 {
			fmt.Fprintln(tw, "  PLACED\tTASK\tNODE\tDEVICES\tBY\tWHEN")
			for _, pl := range p.Placements {
				when := "now"
				if pl.Pipelined {
					when = "pipelined"
				}
				fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\n", pl.Job, pl.Task, pl.Node, ints(pl.Devices), pl.Action, when)
			}
		}
		if len(p.Evictions) > 0 {
			fmt.Fprintln(tw, "  EVICTED\tTASK\tNODE\tBY\tWHY")
			for _, e := range p.Evictions {
				fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", e.Job, e.Task, e.Node, e.Action, e.Reason)
			}
		}
		fmt.Fprintln(tw, "  QUEUE\tFAIR GPU\tALLOC GPU\tFAIR CPU\tALLOC CPU\tFAIR MEM\tALLOC MEM")
		for _, q := range p.Queues {
			f, a := units(q.FairShare), units(q.Allocated)
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%sGB\t%sGB\n", q.Name, num(f["gpu"]), num(a["gpu"]),
				num(f["cpu"]), num(a["cpu"]), num(f["memory"]), num(a["memory"]))
		}
		names := make([]string, 0, len(p.Pending))
		for name := range p.Pending {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			fmt.Fprintf(tw, "  pending %s: %s\n", name, p.Pending[name])
		}
		if i < len(res.Between) && len(res.Between[i]) > 0 {
			fmt.Fprintf(tw, "  before cycle %d:\n", i+2)
			for _, e := range res.Between[i] {
				fmt.Fprintf(tw, "    %s\n", e)
			}
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
