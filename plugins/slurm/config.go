package slurm

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
)

// Config is a Slurm backend's configuration (a project's
// `backends: [{type: slurm, ...}]` entry).
type Config struct {
	// URL is slurmrestd's address, http://host:port or https://host:port.
	URL string `json:"url"`
	// User is the Slurm user jobs are submitted as (X-SLURM-USER-NAME);
	// Token is a JWT for that user (`scontrol token username=USER
	// lifespan=SECONDS`), stored sealed like every backend credential.
	User  string `json:"user"`
	Token string `json:"token"`
	// APIVersion is slurmrestd's OpenAPI plugin version; default v0.0.38
	// (Slurm 22.05). The check probes it.
	APIVersion string `json:"api_version,omitempty"`
	// Partitions jobs are submitted to (Slurm picks among them) and whose
	// nodes are offered; default: the cluster's default partition.
	Partitions []string `json:"partitions,omitempty"`
	// Account jobs are charged to (sbatch --account); default the user's.
	Account string `json:"account,omitempty"`
	// QOS of the jobs (sbatch --qos); default the association's.
	QOS string `json:"qos,omitempty"`
	// OutputDir is a directory shared by the nodes and the server's host:
	// the jobs (as User) write their output there and the plugin reads it.
	OutputDir string `json:"output_dir"`
	// TimeLimitMinutes is each job's Slurm time limit; default the
	// partition's (gpud's max_duration stops a run itself).
	TimeLimitMinutes int `json:"time_limit_minutes,omitempty"`
	// ServerID tells this server's jobs from another gpud's on the same
	// cluster (in each job's comment); default "gpud".
	ServerID string `json:"server_id,omitempty"`
	// Region is reported on offers; default the cluster's name.
	Region string `json:"region,omitempty"`
	// TimeoutSeconds bounds each call to slurmrestd; default 30.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

var (
	apiVersionRE = regexp.MustCompile(`^v0\.0\.[0-9]+$`)
	slurmNameRE  = regexp.MustCompile(`^[A-Za-z0-9_.@-]+$`)
)

func (c Config) withDefaults() Config {
	if c.APIVersion == "" {
		c.APIVersion = "v0.0.38"
	}
	if c.ServerID == "" {
		c.ServerID = "gpud"
	}
	if c.TimeoutSeconds <= 0 {
		c.TimeoutSeconds = 30
	}
	c.URL = strings.TrimRight(c.URL, "/")
	return c
}

// validate checks the configuration without reaching slurmrestd, naming
// the field at fault.
func (c Config) validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return errors.New("slurm backend: url: required (slurmrestd's address, http://host:port)")
	case err != nil:
		return fmt.Errorf("slurm backend: url: %w", err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("slurm backend: url %q: want http://host:port or https://host:port", c.URL)
	case c.User == "":
		return errors.New("slurm backend: user: required (the Slurm user jobs run as)")
	case !slurmNameRE.MatchString(c.User):
		return fmt.Errorf("slurm backend: user %q: not a user name", c.User)
	case c.Token == "":
		return errors.New("slurm backend: token: required (a JWT for user: scontrol token username=USER lifespan=SECONDS)")
	case strings.ContainsAny(c.Token, " \t\r\n"):
		return errors.New("slurm backend: token: contains white space (give the JWT alone, without SLURM_JWT=)")
	case !apiVersionRE.MatchString(c.APIVersion):
		return fmt.Errorf("slurm backend: api_version %q: want v0.0.N (Slurm 22.05's slurmrestd serves v0.0.36 to v0.0.38)", c.APIVersion)
	case c.OutputDir == "":
		return errors.New("slurm backend: output_dir: required (a directory the nodes and this server share; jobs write their output there)")
	case !filepath.IsAbs(c.OutputDir):
		return fmt.Errorf("slurm backend: output_dir %q: must be an absolute path", c.OutputDir)
	case strings.ContainsAny(c.OutputDir, "'\"\\$`\n%"):
		return fmt.Errorf("slurm backend: output_dir %q: quotes, $, `, %% and backslashes are not allowed", c.OutputDir)
	case c.Account != "" && !slurmNameRE.MatchString(c.Account):
		return fmt.Errorf("slurm backend: account %q: not an account name", c.Account)
	case c.QOS != "" && !slurmNameRE.MatchString(c.QOS):
		return fmt.Errorf("slurm backend: qos %q: not a QOS name", c.QOS)
	case c.TimeLimitMinutes < 0:
		return errors.New("slurm backend: time_limit_minutes: must not be negative")
	case !slurmNameRE.MatchString(c.ServerID):
		return fmt.Errorf("slurm backend: server_id %q: letters, digits, _.@- only", c.ServerID)
	}
	for i, p := range c.Partitions {
		if !slurmNameRE.MatchString(p) {
			return fmt.Errorf("slurm backend: partitions[%d] %q: not a partition name", i, p)
		}
	}
	return nil
}
