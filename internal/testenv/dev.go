package testenv

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildBinaries builds helmr and the static helmr-agent into a new
// temporary directory and returns it.
func BuildBinaries() (string, error) {
	dir, err := os.MkdirTemp("", "helmr-bin-")
	if err != nil {
		return "", err
	}
	for _, b := range [][2]string{{"helmr", "./cmd/helmr"}, {"helmr-agent", "./cmd/helmr-agent"}} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b[0]), b[1])
		cmd.Dir, cmd.Env = RepoRoot(), append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %v\n%s", b[0], err, out)
		}
	}
	return dir, nil
}

// Dev is a `helmr dev` started by StartDev.
type Dev struct {
	URL string
	// Token is the owner credential helmr dev wrote to its profile.
	Token string
	Cmd   *exec.Cmd
}

// StartDev starts bin/helmr dev with env (which must set HELMR_PROFILE)
// and waits for it to print its URL.
func StartDev(bin string, env []string) (*Dev, error) {
	cmd := exec.Command(filepath.Join(bin, "helmr"), "dev")
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &Dev{Cmd: cmd}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Helmr dev at "); ok {
			d.URL = strings.Fields(rest)[0]
			go func() {
				for sc.Scan() {
				}
			}()
			tok, err := profileCredential(envValue(env, "HELMR_PROFILE"))
			if err != nil {
				d.Stop()
				return nil, err
			}
			d.Token = tok
			return d, nil
		}
	}
	d.Stop()
	return nil, errors.New("helmr dev did not start")
}

// profileCredential reads the credential helmr dev wrote to the CLI
// profile at path (config.Profile, read here without importing config,
// which packages testenv serves import).
func profileCredential(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("helmr dev's profile (HELMR_PROFILE): %w", err)
	}
	var p struct {
		Credential string `json:"credential"`
	}
	if err := json.Unmarshal(data, &p); err != nil || p.Credential == "" {
		return "", fmt.Errorf("helmr dev wrote no credential to its profile %s (%v)", path, err)
	}
	return p.Credential, nil
}

// envValue is the last value of name in env.
func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// Stop interrupts helmr dev and waits for it to exit.
func (d *Dev) Stop() {
	_ = d.Cmd.Process.Signal(os.Interrupt)
	_ = d.Cmd.Wait()
}
