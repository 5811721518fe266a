package deploy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// missing stops a test whose tool is not installed: it skips on a
// developer's machine and fails under CI (the CI variable set), as
// internal/testdep does in the main module; scripts/test.sh recognises
// the prefix.
func missing(t *testing.T, what string) {
	t.Helper()
	msg := "MISSING DEPENDENCY: " + what
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set: a test that cannot run fails)")
	}
	t.Skip(msg)
}

// requiredVars are the ${VAR} references of hookledger.yaml without a
// default: whatever runs the container must set each of them.
func requiredVars(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("hookledger.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var vars []string
	for _, m := range regexp.MustCompile(`\$\{([A-Z0-9_]+)\}`).FindAllStringSubmatch(string(b), -1) {
		if !slices.Contains(vars, m[1]) {
			vars = append(vars, m[1])
		}
	}
	slices.Sort(vars)
	if len(vars) == 0 {
		t.Fatal("hookledger.yaml requires no variable: the secrets would be in the file")
	}
	return vars
}

// The compose file is valid by the compose specification (compose-go
// loads it with schema validation and interpolation, as docker compose
// does) and runs two hookledger replicas of one image on the PostgreSQL
// service, each given every variable the configuration needs.
func TestComposeFile(t *testing.T) {
	env := types.Mapping{
		"HOOKLEDGER_VERSION":     "v1.2.3",
		"POSTGRES_PASSWORD":      "pw",
		"HOOKLEDGER_ADMIN_TOKEN": "token",
		"STRIPE_WEBHOOK_SECRET":  "whsec_x",
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	details := types.ConfigDetails{
		WorkingDir:  wd,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(wd, "compose.yaml")}},
		Environment: env,
	}
	p, err := loader.LoadWithContext(context.Background(), details)
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	var replicas []types.ServiceConfig
	for _, s := range p.Services {
		if strings.HasPrefix(s.Name, "hookledger") {
			replicas = append(replicas, s)
		}
	}
	if len(replicas) != 2 {
		t.Fatalf("%d hookledger services, want 2", len(replicas))
	}
	pg, ok := p.Services["postgres"]
	if !ok || pg.HealthCheck == nil {
		t.Fatal("no postgres service with a health check")
	}
	published := map[string]bool{}
	for _, s := range replicas {
		if s.Image != "hookledger:v1.2.3" {
			t.Errorf("%s: image %q", s.Name, s.Image)
		}
		if d, ok := s.DependsOn["postgres"]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("%s: does not wait for postgres to be healthy: %+v", s.Name, s.DependsOn)
		}
		for _, v := range requiredVars(t) {
			if val := s.Environment[v]; val == nil || *val == "" {
				t.Errorf("%s: %s is not set, which hookledger.yaml requires", s.Name, v)
			}
		}
		if st := s.Environment["HOOKLEDGER_STORE"]; st == nil || !strings.HasPrefix(*st, "postgres://hookledger:pw@postgres:5432/hookledger") {
			t.Errorf("%s: HOOKLEDGER_STORE %v is not the postgres service", s.Name, st)
		}
		if !slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Target == "/etc/hookledger/hookledger.yaml" && v.Source == filepath.Join(wd, "hookledger.yaml") && v.ReadOnly
		}) {
			t.Errorf("%s: hookledger.yaml is not mounted read-only where the image reads it: %+v", s.Name, s.Volumes)
		}
		if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) <= 20*time.Second {
			t.Errorf("%s: stop_grace_period %v, want longer than the 20 s drain", s.Name, s.StopGracePeriod)
		}
		for _, port := range s.Ports {
			if port.Target != 8080 || port.HostIP != "127.0.0.1" || published[port.Published] {
				t.Errorf("%s: port %+v: want 8080 on its own loopback port", s.Name, port)
			}
			published[port.Published] = true
		}
	}
}

// A compose file with a key the specification does not know is refused:
// the test above would notice a typo.
func TestComposeFileIsValidated(t *testing.T) {
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(b, []byte("  stop_grace_period: 40s"), []byte("  stop_grace_periods: 40s"), 1)
	if bytes.Equal(b, bad) {
		t.Fatal("compose.yaml has no stop_grace_period to misspell")
	}
	_, err = loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  t.TempDir(),
		ConfigFiles: []types.ConfigFile{{Filename: "compose.yaml", Content: bad}},
		Environment: types.Mapping{"HOOKLEDGER_VERSION": "v", "POSTGRES_PASSWORD": "p", "HOOKLEDGER_ADMIN_TOKEN": "t", "STRIPE_WEBHOOK_SECRET": "s"},
	})
	if err == nil || !strings.Contains(err.Error(), "stop_grace_periods") {
		t.Fatalf("a misspelt key: %v, want an error naming it", err)
	}
}

// decodeStrict decodes a manifest as the API server does: YAML to JSON
// (refusing duplicate keys), then JSON into the API type with field names
// matched case-sensitively and unknown fields refused. (encoding/json, and
// yaml.UnmarshalStrict through it, would take "readinessprobe" for
// "readinessProbe".)
func decodeStrict(b []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// manifests reads every Kubernetes manifest, decoding each strictly into
// its API type: an unknown or misplaced field is an error.
type manifests struct {
	deployment appsv1.Deployment
	service    corev1.Service
	secret     corev1.Secret
	configMap  corev1.ConfigMap
}

func readManifests(t *testing.T) manifests {
	t.Helper()
	var m manifests
	targets := map[string]any{
		"Deployment": &m.deployment, "Service": &m.service, "Secret": &m.secret, "ConfigMap": &m.configMap,
	}
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	seen := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(b, &head); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		target, ok := targets[head.Kind]
		if !ok {
			t.Fatalf("%s: kind %q: the test knows Deployment, Service, Secret and ConfigMap", f, head.Kind)
		}
		if prev, dup := seen[head.Kind]; dup {
			t.Fatalf("%s and %s are both a %s", prev, f, head.Kind)
		}
		seen[head.Kind] = f
		if err := decodeStrict(b, target); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if len(seen) != len(targets) {
		t.Fatalf("manifests %v, want one of each of %d kinds", seen, len(targets))
	}
	want := map[string]string{"Deployment": "apps/v1", "Service": "v1", "Secret": "v1", "ConfigMap": "v1"}
	for kind, tm := range map[string]string{
		"Deployment": m.deployment.APIVersion, "Service": m.service.APIVersion,
		"Secret": m.secret.APIVersion, "ConfigMap": m.configMap.APIVersion,
	} {
		if tm != want[kind] {
			t.Errorf("%s: apiVersion %q, want %q", kind, tm, want[kind])
		}
	}
	return m
}

// The Kubernetes manifests decode strictly into the API's types, and fit
// together: readiness on /readyz and liveness on /healthz on the
// container's port, a non-root pod, the Secret providing every variable
// the configuration requires (PostgreSQL by URL among them), the ConfigMap
// holding hookledger.yaml as is, and the Service selecting the pods.
func TestKubernetesManifests(t *testing.T) {
	m := readManifests(t)
	pod := m.deployment.Spec.Template
	if m.deployment.Spec.Replicas == nil || *m.deployment.Spec.Replicas < 2 {
		t.Errorf("replicas %v, want at least 2", m.deployment.Spec.Replicas)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	probe := func(what string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path {
			t.Errorf("%s probe %+v, want GET %s", what, p, path)
			return
		}
		if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
			return cp.Name == p.HTTPGet.Port.String() && cp.ContainerPort == 8080
		}) {
			t.Errorf("%s probe port %q is not the container's port 8080", what, p.HTTPGet.Port.String())
		}
	}
	probe("readiness", c.ReadinessProbe, "/readyz")
	probe("liveness", c.LivenessProbe, "/healthz")
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		t.Errorf("pod security context %+v, want runAsNonRoot as user 65532", sc)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g <= 20 {
		t.Errorf("terminationGracePeriodSeconds %v, want longer than the 20 s drain", g)
	}

	if !slices.ContainsFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
		return e.SecretRef != nil && e.SecretRef.Name == m.secret.Name
	}) {
		t.Errorf("the container takes no variables from Secret %q", m.secret.Name)
	}
	for _, v := range requiredVars(t) {
		if m.secret.StringData[v] == "" {
			t.Errorf("Secret %s has no %s, which hookledger.yaml requires", m.secret.Name, v)
		}
	}
	if !strings.HasPrefix(m.secret.StringData["HOOKLEDGER_STORE"], "postgres://") {
		t.Errorf("HOOKLEDGER_STORE %q is not a PostgreSQL URL", m.secret.StringData["HOOKLEDGER_STORE"])
	}

	cfg, err := os.ReadFile("hookledger.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if m.configMap.Data["hookledger.yaml"] != string(cfg) {
		t.Error("ConfigMap's hookledger.yaml differs from deploy/hookledger.yaml")
	}
	mounted := false
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil && v.ConfigMap.Name == m.configMap.Name && vm.MountPath == "/etc/hookledger" {
				mounted = true
			}
		}
	}
	if !mounted || !slices.Contains(c.Args, "/etc/hookledger/hookledger.yaml") {
		t.Errorf("ConfigMap %s is not mounted at /etc/hookledger and read from there (args %q)", m.configMap.Name, c.Args)
	}

	for k, v := range m.service.Spec.Selector {
		if pod.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not select the pods (labels %v)", k, v, pod.Labels)
		}
	}
	for _, sp := range m.service.Spec.Ports {
		if sp.TargetPort.String() != "http" {
			t.Errorf("Service port %+v does not target the container's http port", sp)
		}
	}
}

// Strict decoding refuses a field the API does not have (a probe
// misplaced one level up, say), so the test above reads what Kubernetes
// would.
func TestKubernetesDecodingIsStrict(t *testing.T) {
	b, err := os.ReadFile("kubernetes/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(b, []byte("readinessProbe:"), []byte("readinessprobe:"), 1)
	if bytes.Equal(b, bad) {
		t.Fatal("deployment.yaml has no readinessProbe")
	}
	var d appsv1.Deployment
	if err := decodeStrict(bad, &d); err == nil || !strings.Contains(err.Error(), "readinessprobe") {
		t.Fatalf("a misspelt field: %v, want an error naming it", err)
	}
}

// unitInDoc is the systemd unit docs/deploy.md shows: its ```ini block.
func unitInDoc(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```ini\n(.*?)```\n").FindAllSubmatch(doc, -1)
	if len(blocks) != 1 {
		t.Fatalf("docs/deploy.md has %d ini blocks, want the unit's alone", len(blocks))
	}
	return string(blocks[0][1])
}

// docs/deploy.md shows hookledger.service as it is, and the unit has no
// comment after a value: systemd reads only whole lines as comments, so
// "EnvironmentFile=/etc/hookledger/env  # ..." names a file that does not
// exist.
func TestSystemdUnitMatchesTheDocs(t *testing.T) {
	unit, err := os.ReadFile("hookledger.service")
	if err != nil {
		t.Fatal(err)
	}
	if doc := unitInDoc(t); doc != string(unit) {
		t.Errorf("docs/deploy.md's unit differs from deploy/hookledger.service:\n--- docs\n%s--- file\n%s", doc, unit)
	}
	for i, line := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(k, "#") && strings.Contains(v, "#") {
			t.Errorf("hookledger.service:%d: %q: a comment after a value is part of the value", i+1, line)
		}
	}
}

// systemd-analyze verify reads the unit as systemd would, in a root of its
// own that holds the binary (it checks that ExecStart names an
// executable) and the system's unit files (the targets it refers to).
// Any complaint naming the unit fails the test, warnings included
// (systemd-analyze exits 0 on an unknown key).
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		missing(t, "systemd-analyze (Debian: apt-get install systemd)")
	}
	verify(t, analyze, "hookledger.service", true)
}

func verify(t *testing.T, analyze, unitFile string, wantClean bool) {
	t.Helper()
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, d := range []string{"usr/local/bin", "etc/systemd/system", "usr/lib/systemd"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/local/bin/hookledger"), []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/systemd/system/hookledger.service"), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	// A copy, links kept: systemd resolves the units' absolute links
	// inside the root.
	if out, err := exec.Command("cp", "-a", "/usr/lib/systemd/system", filepath.Join(root, "usr/lib/systemd/")).CombinedOutput(); err != nil {
		t.Fatalf("copy the system's units: %v\n%s", err, out)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", "--root="+root, "hookledger.service").CombinedOutput()
	var complaints []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "hookledger.service") {
			complaints = append(complaints, line)
		}
	}
	clean := err == nil && len(complaints) == 0
	if clean != wantClean {
		t.Errorf("systemd-analyze verify: %v, complaints %q; want clean %v\n%s", err, complaints, wantClean, out)
	}
}

// The verification above notices a broken unit.
func TestSystemdVerifyNoticesErrors(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		missing(t, "systemd-analyze (Debian: apt-get install systemd)")
	}
	unit, err := os.ReadFile("hookledger.service")
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "hookledger.service")
	if err := os.WriteFile(bad, bytes.Replace(unit, []byte("RestartSec=2s"), []byte("RestartSec=2x"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	verify(t, analyze, bad, false)
}
