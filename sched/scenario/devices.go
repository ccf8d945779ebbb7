package scenario

import "gpud.dev/gpud/sched"

// unplacedDevices is a running or releasing task written without
// devices: the loader picks them (assignDevices).
type unplacedDevices struct {
	path      string
	job, task int
}

// devUse is what running and releasing tasks hold of one device while the
// loader assigns devices: a whole task, or the sum of fractions.
type devUse struct {
	whole bool
	frac  int64 // milli-GPUs held by fractional tasks
}

// assignDevices gives every running or releasing task that names no
// devices free devices of its node, as a cluster would have when the task
// started (KAI's own scenarios never name devices): first the tasks that
// name theirs are counted, then whole-GPU tasks take the lowest free
// indices, then fractions go to the device they name (device: N) or the
// first device with room. Devices must match the task's kind (a MIG
// profile, or a whole GPU). A node without room is an error at the task.
func (b *builder) assignDevices(snap *sched.Snapshot, todo []unplacedDevices) {
	use := map[string][]devUse{}
	nodeOf := map[string]*sched.Node{}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		nodeOf[n.Name] = n
		use[n.Name] = make([]devUse, len(n.Devices))
	}
	pos := func(n *sched.Node, index int) int {
		for p, d := range n.Devices {
			if d.Index == index {
				return p
			}
		}
		return -1
	}
	missing := map[[2]int]bool{}
	for _, u := range todo {
		missing[[2]int{u.job, u.task}] = true
	}
	// Tasks that name their devices hold them first.
	for j := range snap.Jobs {
		for t := range snap.Jobs[j].Tasks {
			task := &snap.Jobs[j].Tasks[t]
			n := nodeOf[task.Node]
			if task.Status == sched.Pending || n == nil || missing[[2]int{j, t}] {
				continue
			}
			for _, d := range task.Devices {
				if p := pos(n, d); p >= 0 {
					if task.GPU < sched.OneGPU {
						use[n.Name][p].frac += task.GPU
					} else {
						use[n.Name][p].whole = true
					}
				}
			}
		}
	}
	fits := func(n *sched.Node, u []devUse, p int, task *sched.Task) bool {
		if n.Devices[p].MIG != task.MIG || u[p].whole {
			return false
		}
		if task.GPU >= sched.OneGPU || task.MIG != "" {
			return u[p].frac == 0
		}
		return u[p].frac+task.GPU <= sched.OneGPU
	}
	for _, wholePass := range []bool{true, false} {
		for _, u := range todo {
			task := &snap.Jobs[u.job].Tasks[u.task]
			whole := task.GPU >= sched.OneGPU || task.MIG != ""
			if whole != wholePass || task.GPU == 0 && task.MIG == "" {
				continue
			}
			n := nodeOf[task.Node]
			if n == nil {
				continue // already reported
			}
			nu := use[n.Name]
			want := 1
			if task.GPU > sched.OneGPU {
				want = int(task.GPU / sched.OneGPU)
			}
			var got []int
			for p := range n.Devices {
				if len(got) < want && fits(n, nu, p, task) {
					got = append(got, p)
				}
			}
			if len(got) < want {
				b.fail(u.path+".devices", "node %s has %d free device(s) for this task, it needs %d: name the devices or free some",
					n.Name, len(got), want)
				continue
			}
			for _, p := range got {
				if whole {
					nu[p].whole = true
				} else {
					nu[p].frac += task.GPU
				}
				task.Devices = append(task.Devices, n.Devices[p].Index)
			}
		}
	}
}
