package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/client"
)

const apikeyUsage = "usage: helmr apikey create --env ENV --grant G1,G2 [--expires 30d] [--name NAME] | create --worker [--expires 30d] [--name NAME] | list | revoke ID"

// runAPIKey manages API keys. Only the owner credential may: a key cannot
// make, see or revoke keys.
func runAPIKey(ctx context.Context, a *App, args []string) error {
	if len(args) == 0 {
		return errors.New(apikeyUsage)
	}
	fs := a.flags("apikey " + args[0])
	var grants, expires, name string
	var worker bool
	if args[0] == "create" {
		fs.BoolVar(&worker, "worker", false, "make a worker credential (for helmr worker's HELMR_WORKER_TOKEN) instead of an API key")
		fs.StringVar(&grants, "grant", "", "comma-separated grants: "+grantNames())
		fs.StringVar(&expires, "expires", "", "lifetime: days (30d), hours (12h) or minutes (90m); default: none")
		fs.StringVar(&name, "name", "", "a name to recognise the key by (letters, digits, '.', '_', '-')")
	}
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	switch args[0] {
	case "create":
		if worker {
			return createWorkerCredential(ctx, a, c, pos, grants, name, expires)
		}
		if len(pos) != 0 || grants == "" {
			return errors.New("usage: helmr apikey create --env ENV --grant G1,G2 [--expires 30d] [--name NAME] (grants: " + grantNames() + ")")
		}
		if err := a.requireProject(); err != nil {
			return err
		}
		list := strings.Split(grants, ",")
		for i := range list {
			list[i] = strings.TrimSpace(list[i])
		}
		k, key, err := c.CreateAPIKey(ctx, apikeys.CreateRequest{Project: a.cfg.Project, Env: a.cfg.Env, Name: name, Grants: list, ExpiresIn: expires})
		if err != nil {
			return err
		}
		if a.json {
			return a.printJSON(map[string]any{"key": key, "apiKey": k})
		}
		fmt.Fprintf(a.Stderr, "API key %s for %s/%s with %s%s. It is shown this once: Helmr keeps only its hash.\n",
			k.ID, k.Project, k.Env, joinGrants(k.Grants), expiry(k))
		fmt.Fprintln(a.Stdout, key)
		return nil
	case "list":
		if len(pos) != 0 {
			return errors.New("usage: helmr apikey list")
		}
		ks, err := c.ListAPIKeys(ctx)
		if err != nil {
			return err
		}
		if a.json {
			if ks == nil {
				ks = []apikeys.Key{}
			}
			return a.printJSON(ks)
		}
		tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKIND\tNAME\tPROJECT/ENV\tGRANTS\tCREATED\tEXPIRES\tREVOKED\tLAST USED")
		for _, k := range ks {
			scope, grants := k.Project+"/"+k.Env, joinGrants(k.Grants)
			if k.Kind == apikeys.KindWorker {
				scope, grants = "-", "(leases runs)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Kind, or(k.Name, "-"), scope, grants,
				when(&k.CreatedAt), when(k.ExpiresAt), when(k.RevokedAt), when(k.LastUsedAt))
		}
		return tw.Flush()
	case "revoke":
		if len(pos) != 1 {
			return errors.New("usage: helmr apikey revoke ID")
		}
		k, err := c.RevokeAPIKey(ctx, pos[0])
		if err != nil {
			return err
		}
		if a.json {
			return a.printJSON(k)
		}
		fmt.Fprintf(a.Stdout, "API key %s revoked\n", k.ID)
		return nil
	}
	return errors.New(apikeyUsage)
}

// createWorkerCredential is apikey create --worker.
func createWorkerCredential(ctx context.Context, a *App, c *client.Client, pos []string, grants, name, expires string) error {
	if len(pos) != 0 || grants != "" {
		return errors.New("usage: helmr apikey create --worker [--expires 30d] [--name NAME] (a worker credential has no grants)")
	}
	k, key, err := c.CreateWorkerCredential(ctx, apikeys.CreateWorkerRequest{Name: name, ExpiresIn: expires})
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(map[string]any{"key": key, "apiKey": k})
	}
	fmt.Fprintf(a.Stderr, "worker credential %s%s: give it to helmr worker as HELMR_WORKER_TOKEN. It is shown this once: Helmr keeps only its hash.\n", k.ID, expiry(k))
	fmt.Fprintln(a.Stdout, key)
	return nil
}

func grantNames() string {
	s := make([]string, len(apikeys.Grants))
	for i, g := range apikeys.Grants {
		s[i] = string(g)
	}
	return strings.Join(s, ", ")
}

func joinGrants(gs []apikeys.Grant) string {
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = string(g)
	}
	return strings.Join(s, ",")
}

func expiry(k apikeys.Key) string {
	if k.ExpiresAt == nil {
		return ", no expiry"
	}
	return ", expiring " + when(k.ExpiresAt)
}

func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
