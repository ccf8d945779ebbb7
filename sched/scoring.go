package sched

// scorer is a placement strategy's whole say in where a task goes: the
// order in which it visits candidates (free-capacity buckets, devices,
// topology domains, hosts). Placement itself is the same pipeline for every
// strategy — feasibility (matchingClasses, fitsHost) → the scorer's order
// → topology (placeGang) → the first candidate that fits is the choice —
// so a new strategy is one more scorer, not another branch in each step.
type scorer interface {
	// bucket is the free-whole-device count to scan at step (0, 1, …) for
	// a task that needs want devices, when no node has more than top.
	bucket(step, want, top int) int
	// partialFirst reports whether a fractional task tries devices other
	// fractional tasks already share before wholly free ones.
	partialFirst() bool
	// betterDevice reports whether a device with free capacity f (shared
	// by fractional tasks or not) beats the best so far for a fractional
	// task.
	betterDevice(f, bestF int64, shared, bestShared bool) bool
	// before reports whether a candidate with room free (a domain, a
	// host's CPU) comes before one with otherRoom.
	before(room, otherRoom int64) bool
}

// binPack fills the fullest candidate that fits, keeping whole devices
// and nodes free for large jobs.
type binPack struct{}

func (binPack) bucket(step, want, _ int) int { return want + step }
func (binPack) partialFirst() bool           { return true }
func (binPack) betterDevice(f, bestF int64, shared, bestShared bool) bool {
	if shared != bestShared {
		return shared
	}
	return f < bestF
}
func (binPack) before(room, otherRoom int64) bool { return room < otherRoom }

// spread uses the emptiest candidate, spreading load across nodes and
// devices.
type spread struct{}

func (spread) bucket(step, _, top int) int                 { return top - step }
func (spread) partialFirst() bool                          { return false }
func (spread) betterDevice(f, bestF int64, _, _ bool) bool { return f > bestF }
func (spread) before(room, otherRoom int64) bool           { return room > otherRoom }

// scorerFor returns the scorer of a strategy.
func scorerFor(s Strategy) scorer {
	if s == Spread {
		return spread{}
	}
	return binPack{}
}
