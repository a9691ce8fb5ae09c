package apikeys

import "slices"

// Principal is who a request acts as: the owner, or one API key.
type Principal struct {
	// Owner holds every grant on every project environment.
	Owner bool
	// KeyID, Project and Env identify an API key and its scope.
	KeyID        string
	Project, Env string
	Grants       []Grant
}

// Has reports whether p holds grant g.
func (p Principal) Has(g Grant) bool { return p.Owner || slices.Contains(p.Grants, g) }

// InScope reports whether p may act on project environment project/env.
func (p Principal) InScope(project, env string) bool {
	return p.Owner || (p.Project == project && p.Env == env)
}

// String names p for logs and messages: never a secret.
func (p Principal) String() string {
	if p.Owner {
		return "owner"
	}
	return "API key " + p.KeyID
}
