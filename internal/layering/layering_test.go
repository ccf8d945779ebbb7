package layering

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "gpud.dev/gpud"

// rule forbids packages under from (itself included; only from itself when
// exact) to depend, directly or through others, on any package under the
// listed prefixes.
type rule struct {
	from   string
	exact  bool
	forbid []string
	why    string
}

// rules are docs/ARCHITECTURE.md §2, as import constraints.
var rules = []rule{
	{"api", false, []string{""}, "api imports no gpud package: client and server share it"},
	{"sched", true, []string{""}, "sched is pure: Snapshot -> Plan, no I/O, its own value types"},
	{"sched/scenario", false, []string{"agent", "daemon", "store", "plugins", "proxy", "cli"}, "scenarios run the scheduler offline, without a server"},
	{"store", false, []string{"agent", "daemon", "sched", "plugins", "proxy", "cli"}, "store knows only its records"},
	{"agent", false, []string{"daemon", "store", "sched", "plugins", "proxy", "cli"}, "the agent runs on hosts without the server's packages"},
	{"plugins", false, []string{"daemon", "store", "sched", "proxy", "cli"}, "plugins never import the server"},
	{"proxy", false, []string{"daemon", "store", "sched", "agent", "plugins", "cli"}, "the gateway never imports the server"},
	{"daemon", false, []string{"cli"}, "the server does not know its command line"},
}

// wiring may import daemon: only the command line wires the server.
var wiring = []string{module, module + "/cli"}

func under(pkg, prefix string) bool {
	if prefix == "" {
		return pkg == module || strings.HasPrefix(pkg, module+"/")
	}
	p := module + "/" + prefix
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

// deps lists each gpud package with its gpud dependencies (transitive, not
// tests').
func deps(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	all := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var own []string
		for _, d := range f[1:] {
			if under(d, "") {
				own = append(own, d)
			}
		}
		all[f[0]] = own
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return all
}

func TestPackagesImportOnlyWhatTheArchitectureAllows(t *testing.T) {
	all := deps(t)
	if len(all) < 10 {
		t.Fatalf("go list found %d gpud packages: the module was not read", len(all))
	}
	checked := 0
	for pkg, ds := range all {
		for _, r := range rules {
			if !under(pkg, r.from) || r.exact && pkg != module+"/"+r.from {
				continue
			}
			checked++
			for _, d := range ds {
				for _, f := range r.forbid {
					// A package may use its own sub-packages.
					if under(d, f) && !under(d, r.from) {
						t.Errorf("%s depends on %s: %s", pkg, d, r.why)
					}
				}
			}
		}
		for _, d := range ds {
			if under(d, "daemon") && !under(pkg, "daemon") && !isWiring(pkg) {
				t.Errorf("%s depends on %s: only the command line wires the server", pkg, d)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package matched a rule")
	}
}

func isWiring(pkg string) bool {
	for _, w := range wiring {
		if pkg == w || strings.HasPrefix(pkg, w+"/") && w != module {
			return true
		}
	}
	return false
}
