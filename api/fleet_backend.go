package api

// FleetBackend is one entry of a backend fleet's backends (issue 17): the
// type or name its configuration writes, the project's backends it
// selects now, and why it selects none.
type FleetBackend struct {
	// Name is the entry as the configuration writes it (a type, like
	// kubernetes, or a backend's name).
	Name string `json:"name"`
	// Selects are the names of the project's backends it selects.
	Selects []string `json:"selects"`
	// Reason says why it selects none (the backend was deleted, say).
	Reason string `json:"reason,omitempty"`
}

// FleetNodesUse is how many nodes a backend fleet's runs hold now (the
// jobs bound to its backends' capacity) against its configured maximum.
type FleetNodesUse struct {
	InUse int  `json:"in_use"`
	Max   *int `json:"max,omitempty"` // nil: no maximum
}
