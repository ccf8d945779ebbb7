package cli

import (
	"os"

	"gpud.dev/gpud/api"
)

// selectProfile loads profiles from the working directory, then the home
// directory, and picks the named one (or the default one).
func selectProfile(name string) (*api.Profile, error) {
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		dirs = append(dirs, wd)
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, home)
	}
	ps, err := api.LoadProfiles(dirs...)
	if err != nil {
		return nil, err
	}
	return ps.Select(name)
}
