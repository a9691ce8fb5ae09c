package apikeys

import "slices"

// Principal is who a request acts as: the owner, one API key, or a worker.
type Principal struct {
	// Owner holds every grant on every project environment.
	Owner bool
	// Worker is a worker: by its credential (KeyID set) or by the shared
	// worker token (KeyID empty). It holds no grant.
	Worker bool
	// KeyID, Project and Env identify an API key and its scope.
	KeyID        string
	Project, Env string
	Grants       []Grant
}

// Has reports whether p holds grant g.
func (p Principal) Has(g Grant) bool { return p.Owner || !p.Worker && slices.Contains(p.Grants, g) }

// InScope reports whether p may act on project environment project/env.
func (p Principal) InScope(project, env string) bool {
	return p.Owner || (!p.Worker && p.Project == project && p.Env == env)
}

// WorkerPrefix is what the IDs of the workers a worker credential
// authenticates start with: "<credential id>.". Empty for the shared
// worker token, whose workers are not told apart.
func (p Principal) WorkerPrefix() string {
	if !p.Worker || p.KeyID == "" {
		return ""
	}
	return p.KeyID + "."
}

// String names p for logs and messages: never a secret.
func (p Principal) String() string {
	switch {
	case p.Owner:
		return "owner"
	case p.Worker && p.KeyID == "":
		return "the shared worker token"
	case p.Worker:
		return "worker credential " + p.KeyID
	}
	return "API key " + p.KeyID
}
