package api

// JobRepo is a git repository a job gets cloned into its working
// directory (dstack's `repos` given by URL). The agent clones it on the
// host over http(s) only, with no credentials of the host's, and adds it
// to the job's upload, so it arrives like the uploaded repos and files.
type JobRepo struct {
	URL string `json:"url"`
	// Branch is checked out (default: the remote's default branch).
	Branch string `json:"branch,omitempty"`
	// Hash is a commit checked out after the clone.
	Hash string `json:"hash,omitempty"`
	// Path is where the clone lands, relative to the working directory
	// ("" or "." for the working directory itself).
	Path string `json:"path,omitempty"`
}
