package daemon

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"gpud.dev/gpud/sched"
	"gpud.dev/gpud/store"
)

// What a run costs so far: each job keeps, from the moment it is placed,
// the hourly price of its share of what it was placed on (its GPUs' part
// of a priced backend offer or of a machine an autoscaled fleet made; the
// whole price when the offer or machine has no GPUs). Own hosts cost
// nothing. A run's cost is the sum over all its jobs, every attempt, of
// price × the time each ran (until now for a running one).

// priceLabel and priceGPUsLabel carry a priced backend offer's price per
// hour and its GPU count on its scheduler node.
const (
	priceLabel     = "gpud.dev/price"
	priceGPUsLabel = "gpud.dev/price-gpus"
)

// labelPrice marks node n with its offer's price (nothing for a free one).
func labelPrice(n *sched.Node, price, gpus float64) {
	if price <= 0 {
		return
	}
	n.Labels[priceLabel] = strconv.FormatFloat(price, 'f', -1, 64)
	n.Labels[priceGPUsLabel] = strconv.FormatFloat(gpus, 'f', -1, 64)
}

// placedPrice is the hourly price of a job that takes gpus devices of
// node (nil when the node left the snapshot: priced as free, which only
// under-counts).
func (s *Server) placedPrice(node *sched.Node, gpus int) float64 {
	if node == nil {
		return 0
	}
	if p, err := strconv.ParseFloat(node.Labels[priceLabel], 64); err == nil && p > 0 {
		total, _ := strconv.ParseFloat(node.Labels[priceGPUsLabel], 64)
		return share(p, float64(gpus), total)
	}
	// A machine an autoscaled fleet made: "reg/<fleet>/<machine id>".
	rest, ok := strings.CutPrefix(node.Name, "reg/")
	if !ok {
		return 0
	}
	_, id, ok := strings.Cut(rest, "/")
	if !ok {
		return 0
	}
	b, err := s.store.KV().Load(s.ctx, machineKey(id))
	if err != nil {
		return 0 // a registered host gpud did not make: owned
	}
	var m scaleMachine
	if json.Unmarshal(b, &m) != nil || m.instance() != node.Name {
		return 0
	}
	return share(m.Offer.Price, float64(gpus), m.Offer.Resources.GPUs)
}

// share is a job's part of price when it holds gpus of total GPUs.
func share(price, gpus, total float64) float64 {
	if total <= 0 || gpus <= 0 || gpus >= total {
		return price
	}
	return price * gpus / total
}

// jobCost is what a job with hourly price has cost by now.
func jobCost(price float64, started, bound, finished, now time.Time) float64 {
	if price <= 0 {
		return 0
	}
	from := started
	if from.IsZero() {
		from = bound // pulling on a machine paid for already
	}
	if from.IsZero() {
		return 0
	}
	to := finished
	if to.IsZero() {
		to = now
	}
	if !to.After(from) {
		return 0
	}
	return price * to.Sub(from).Hours()
}

// nodeOf finds name among snap's nodes, indexing them into *index once.
func nodeOf(snap *sched.Snapshot, name string, index *map[string]*sched.Node) *sched.Node {
	if *index == nil {
		*index = make(map[string]*sched.Node, len(snap.Nodes))
		for i := range snap.Nodes {
			(*index)[snap.Nodes[i].Name] = &snap.Nodes[i]
		}
	}
	return (*index)[name]
}

// jobEnd is when a job stopped costing: its own end, else its run's for a
// job that ended without one (lost with its host); the zero time while it
// runs. An ended job with neither ends where it started (no cost counted).
func jobEnd(status string, finished, runFinished time.Time) time.Time {
	switch status {
	case store.JobTerminated, store.JobAborted, store.JobFailed, store.JobDone:
		if finished.IsZero() {
			finished = runFinished
		}
		if finished.IsZero() {
			finished = time.Unix(0, 1) // before any start: nothing counted
		}
	}
	return finished
}
