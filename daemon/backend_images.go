package daemon

import (
	"context"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// withoutImages clears the server's default image (and registry
// credentials) from the specs of a gang bound for a backend that runs no
// images (plugins.Info.NoImage: Slurm runs the commands on its nodes). A
// run that sets image, python or nvcc is refused there by the field rules
// (FeatureImage), so what is cleared is only the default the server
// filled in. An Info that fails leaves the specs as they are: the
// backend refuses an image itself.
func withoutImages(ctx context.Context, b plugins.Backend, jobs []api.JobSpec) {
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := b.Info(ictx)
	if err != nil || info.Supports(plugins.FeatureImage) {
		return
	}
	for i := range jobs {
		jobs[i].Image, jobs[i].RegistryAuth = "", nil
	}
}
