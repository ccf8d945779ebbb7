package api

import (
	"github.com/goccy/go-yaml/ast"
)

// VolumeSpec is a network volume: a new one of Size, or an existing one
// registered by VolumeID (cloud) or ClaimName (Kubernetes).
type VolumeSpec struct {
	Type                Kind              `json:"type"`
	Name                string            `json:"name,omitempty"`
	Backend             string            `json:"backend"`
	Region              string            `json:"region,omitempty"`
	AvailabilityZone    string            `json:"availability_zone,omitempty"`
	Size                SizeSpec          `json:"size,omitempty"`
	VolumeID            string            `json:"volume_id,omitempty"`
	AutoCleanupDuration *Duration         `json:"auto_cleanup_duration,omitempty"`
	ClaimName           string            `json:"claim_name,omitempty"`
	StorageClassName    string            `json:"storage_class_name,omitempty"`
	AccessModes         []string          `json:"access_modes,omitempty"`
	Tags                map[string]string `json:"tags,omitempty"`
}

func (d *decoder) volume(body ast.Node) *VolumeSpec {
	v := &VolumeSpec{}
	present := d.object(body, "", "a volume", fields{
		"type":                  typeField(&v.Type, KindVolume),
		"name":                  func(n ast.Node, p string) { v.Name, _ = value(d, n, p, checkName) },
		"backend":               func(n ast.Node, p string) { v.Backend, _ = d.str(n, p) },
		"region":                func(n ast.Node, p string) { v.Region, _ = d.str(n, p) },
		"availability_zone":     func(n ast.Node, p string) { v.AvailabilityZone, _ = d.str(n, p) },
		"size":                  func(n ast.Node, p string) { v.Size, _ = d.size(n, p) },
		"volume_id":             func(n ast.Node, p string) { v.VolumeID, _ = d.str(n, p) },
		"auto_cleanup_duration": func(n ast.Node, p string) { v.AutoCleanupDuration = d.duration(n, p, true) },
		"claim_name":            func(n ast.Node, p string) { v.ClaimName, _ = d.str(n, p) },
		"storage_class_name":    func(n ast.Node, p string) { v.StorageClassName, _ = d.str(n, p) },
		"access_modes": func(n ast.Node, p string) {
			items, _ := d.seq(n, p, "a list of access modes")
			for i, it := range items {
				if m, ok := d.oneOf(it, index(p, i), "ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"); ok {
					v.AccessModes = append(v.AccessModes, m)
				}
			}
		},
		"tags": func(n ast.Node, p string) { v.Tags = d.tags(n, p) },
	})
	d.require(present, body, "", "backend", "name the backend that provides the volume, like aws or kubernetes")
	if present != nil && v.VolumeID != "" && v.Size != 0 {
		d.errorAt(present["size"], "size", "size and volume_id cannot both be set", "size creates a new volume; volume_id registers an existing one")
	}
	return v
}
