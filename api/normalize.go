package api

// setDefaults fills the defaults of the set spec, after profiles are merged.
func (c *Config) setDefaults() {
	switch {
	case c.Task != nil:
		c.Task.setDefaults()
	case c.Service != nil:
		c.Service.setDefaults()
	case c.DevEnvironment != nil:
		c.DevEnvironment.RunSpec.setDefaults()
	case c.Fleet != nil:
		c.Fleet.setDefaults()
	}
}
