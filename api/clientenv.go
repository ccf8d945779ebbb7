package api

// ClientEnv returns the part of the client's environment a run
// configuration refers to: every ${{ env.X }} in its source text and every
// env entry written without a value. lookup is os.LookupEnv in production.
// Variables that are not set are left out, so the server can name them in
// its error. Nothing else of the client's environment is sent.
func ClientEnv(cfg *Config, source []byte, lookup func(string) (string, bool)) map[string]string {
	env := map[string]string{}
	add := func(name string) {
		if v, ok := lookup(name); ok {
			env[name] = v
		}
	}
	if refs, err := References(string(source)); err == nil {
		for _, r := range refs {
			if r.Namespace == NamespaceEnv {
				add(r.Path)
			}
		}
	}
	if run := cfg.Run(); run != nil {
		for _, v := range run.Env {
			if !v.HasValue {
				add(v.Name)
			}
		}
	}
	if len(env) == 0 {
		return nil
	}
	return env
}
