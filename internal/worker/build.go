package worker

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
)

// Build sandboxes: limits for each run step of an image build.
const (
	buildStepTimeout = time.Hour
	buildMemory      = 4 << 30
	buildCPU         = 2
)

// stepRunner runs image build steps in sandboxes of a tier, under an
// egress policy.
type stepRunner struct {
	rt      sandbox.Runtime
	note    string // said in each step's output: why its tier is not the worker's
	net     *network.Config
	log     *slog.Logger
	caDir   string // holds caFile: extra CA certificates for build steps
	dataDir string
}

// NewStepRunner returns what runs image build steps in sandboxes of rt
// under the egress policy nc, for builds outside a worker (helmr image
// build). build, if set, is the tier that runs them in rt's place, rt's
// tier running none (tiers.SelectBuild); each step's output says so.
// extraCA is a PEM file build steps trust (or ""); it is copied into
// dataDir.
func NewStepRunner(rt, build sandbox.Runtime, nc *network.Config, extraCA, dataDir string, log *slog.Logger) (images.StepRunner, error) {
	sr := stepRunner{rt: rt, net: nc, log: log, dataDir: dataDir}
	if build != nil && build.Name() != rt.Name() {
		sr.rt, sr.note = build, buildTierNote(rt.Name(), build.Name())+"\n"
	}
	if extraCA != "" {
		dir, err := installCACerts(extraCA, filepath.Join(dataDir, "ca"))
		if err != nil {
			return nil, err
		}
		sr.caDir = dir
	}
	return sr, nil
}

// buildTierNote says that the image build steps of a worker on tier run
// on the build tier.
func buildTierNote(tier, build string) string {
	return fmt.Sprintf("[helmr] image build steps run on the %s tier: the %s tier runs none (images are the same layers whichever tier built them)", build, tier)
}

// Where build steps find the operator's extra CA certificates.
const (
	caMount = "/etc/helmr-ca"
	caFile  = "extra-ca.pem"
)

// installCACerts checks that path holds PEM certificates and copies it
// into dir, which build sandboxes mount.
func installCACerts(path, dir string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("extra CA certificates: %w", err)
	}
	n := 0
	for rest := data; ; n++ {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); b.Type != "CERTIFICATE" || err != nil {
			return "", fmt.Errorf("extra CA certificates %s: block %d is not a certificate", path, n+1)
		}
	}
	if n == 0 {
		return "", fmt.Errorf("extra CA certificates %s: no PEM certificate in it", path)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, caFile), data, 0o644)
}

var _ images.StepRunner = stepRunner{}

// RunStep implements images.StepRunner.
func (r stepRunner) RunStep(ctx context.Context, req images.StepRequest) error {
	ctx, cancel := context.WithTimeout(ctx, buildStepTimeout)
	defer cancel()
	spec := sandbox.Spec{
		ID: newSandboxID(), RootLayers: req.Layers, RootUpper: req.Upper, RootWork: req.Work,
		Mounts: req.Caches, UID: req.UID, GID: req.GID, Hostname: "helmr-build",
		CPU: buildCPU, MemoryBytes: buildMemory, Network: r.net,
	}
	env := req.Env
	if r.caDir != "" {
		spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: r.caDir, Dest: caMount, ReadOnly: true})
		env = append(append([]string(nil), env...), "NODE_EXTRA_CA_CERTS="+caMount+"/"+caFile)
	}
	if len(req.Credentials) > 0 && r.net.Attaches() {
		// Egress-bound build secrets: the step trusts a CA of its own,
		// through the environment only (its root is the image being
		// built, so its system bundle stays as it is), and its network
		// stack puts the values into requests to their hosts.
		ca, err := network.NewCA(spec.ID)
		if err != nil {
			return err
		}
		inj := r.net.Injector(spec.ID, ca)
		defer r.net.DropInjector(spec.ID)
		defer inj.Add(req.Credentials...)()
		ts, err := trustFiles(images.Image{Layers: req.Layers}, env, ca.CertPEM())
		if err != nil {
			return err
		}
		dir, err := os.MkdirTemp(r.dataDir, "build-ca-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil { // the step's user reads it
			return err
		}
		if r.caDir != "" { // the operator's extra certificates stay trusted
			extra, err := os.ReadFile(filepath.Join(r.caDir, caFile))
			if err != nil {
				return err
			}
			ts.host["ca.crt"] = append(withNewline(extra), ts.host["ca.crt"]...)
		}
		for name, data := range ts.host {
			if err := writeFile(filepath.Join(dir, "ca", name), data); err != nil {
				return err
			}
		}
		spec.HelmrHost = dir
		env = dedupeEnv(append(append([]string(nil), env...), ts.env...))
	}
	if r.note != "" && req.Output != nil {
		req.Output("stderr", []byte(r.note))
	}
	box, err := r.rt.Start(ctx, spec)
	if err != nil {
		return fmt.Errorf("start a build sandbox: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := box.Destroy(dctx); err != nil {
			r.log.Warn("destroy build sandbox", "err", err)
		}
	}()
	st, err := box.Exec(ctx, sandbox.ExecRequest{Argv: req.Argv, Env: env, Cwd: req.Workdir, OnOutput: req.Output})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: stopped after %s", images.ErrStepFailed, buildStepTimeout)
		}
		return err
	}
	if box.Stats().OOMKilled {
		return fmt.Errorf("%w: killed at the build memory limit of %d MiB", images.ErrStepFailed, buildMemory>>20)
	}
	if st.Code != 0 || st.Signal != "" {
		how := fmt.Sprintf("exit code %d", st.Code)
		if st.Signal != "" {
			how = "signal " + st.Signal
		}
		return fmt.Errorf("%w: %s", images.ErrStepFailed, how)
	}
	return nil
}
