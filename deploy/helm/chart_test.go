package helm_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite tidemark/files/tidemark.rules.yml from deploy/prometheus/tidemark.rules.yml")

const (
	chartDir   = "tidemark"
	rulesFile  = "../prometheus/tidemark.rules.yml"
	chartRules = "tidemark/files/tidemark.rules.yml"
	release    = "tm"
	namespace  = "monitoring"
)

// rendered is one values example rendered: every object, strictly decoded.
type rendered struct {
	cms      []corev1.ConfigMap
	deps     []appsv1.Deployment
	svcs     []corev1.Service
	pdbs     []policyv1.PodDisruptionBudget
	sms      []monitoringv1.ServiceMonitor
	rules    []monitoringv1.PrometheusRule
	kinds    []string // "Kind/name", sorted
	warnings []string
}

// render renders the chart with the values file (none: the chart's defaults) and extra values on top, as `helm
// template` would with release tm in namespace monitoring.
func render(t *testing.T, valuesFile string, extra map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if valuesFile != "" {
		v, err := common.ReadValuesFile(valuesFile)
		if err != nil {
			t.Fatal(err)
		}
		vals = v.AsMap()
	}
	for k, v := range extra {
		vals[k] = v
	}
	top, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, top)
}

// decode decodes every object of a rendering strictly into its API type: a field the type does not have fails.
func decode(t *testing.T, files map[string]string) rendered {
	t.Helper()
	var r rendered
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		dec := yaml.NewDecoder(strings.NewReader(files[name]))
		for {
			var m map[string]any
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v\n%s", name, err, files[name])
			}
			if m == nil {
				continue
			}
			b, err := yaml.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			strict := func(into any) {
				t.Helper()
				if err := k8syaml.UnmarshalStrict(b, into); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
			var tm metav1.TypeMeta
			var om struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			}
			_ = k8syaml.Unmarshal(b, &tm)
			_ = k8syaml.Unmarshal(b, &om)
			r.kinds = append(r.kinds, tm.Kind+"/"+om.Metadata.Name)
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 ConfigMap":
				var o corev1.ConfigMap
				strict(&o)
				r.cms = append(r.cms, o)
			case "apps/v1 Deployment":
				var o appsv1.Deployment
				strict(&o)
				r.deps = append(r.deps, o)
			case "v1 Service":
				var o corev1.Service
				strict(&o)
				r.svcs = append(r.svcs, o)
			case "policy/v1 PodDisruptionBudget":
				var o policyv1.PodDisruptionBudget
				strict(&o)
				r.pdbs = append(r.pdbs, o)
			case "monitoring.coreos.com/v1 ServiceMonitor":
				var o monitoringv1.ServiceMonitor
				strict(&o)
				r.sms = append(r.sms, o)
			case "monitoring.coreos.com/v1 PrometheusRule":
				var o monitoringv1.PrometheusRule
				strict(&o)
				r.rules = append(r.rules, o)
			default:
				t.Errorf("%s: unexpected object %s %s", name, tm.APIVersion, tm.Kind)
			}
			if om.Metadata.Namespace != namespace {
				t.Errorf("%s: %s in namespace %q, want the release's %q", name, tm.Kind, om.Metadata.Namespace, namespace)
			}
			if om.Metadata.Labels["app.kubernetes.io/instance"] != release {
				t.Errorf("%s: %s lacks label app.kubernetes.io/instance=%s", name, tm.Kind, release)
			}
		}
	}
	sort.Strings(r.kinds)
	return r
}

// examples are the values files the tests render: the defaults and every ci/*-values.yaml, with the objects each
// must produce.
var examples = []struct {
	name, file string
	kinds      []string
	mode       string // the Deployment's component label
	replicas   int32
}{
	{"defaults", "", []string{"ConfigMap/tm-tidemark", "Deployment/tm-tidemark", "Service/tm-tidemark"}, "lag-exporter", 1},
	{"lag-exporter", "tidemark/ci/lag-exporter-values.yaml", []string{"ConfigMap/tm-tidemark", "Deployment/tm-tidemark",
		"PrometheusRule/tm-tidemark", "Service/tm-tidemark", "ServiceMonitor/tm-tidemark"}, "lag-exporter", 1},
	{"collector", "tidemark/ci/collector-values.yaml", []string{"ConfigMap/tm-tidemark", "Deployment/tm-tidemark",
		"Service/tm-tidemark"}, "collector", 1},
	{"replicas", "tidemark/ci/replicas-values.yaml", []string{"ConfigMap/tm-tidemark", "Deployment/tm-tidemark",
		"PodDisruptionBudget/tm-tidemark", "Service/tm-tidemark", "ServiceMonitor/tm-tidemark"}, "collector", 2},
}

// TestExamplesCoverCI: every ci/*-values.yaml is one of the examples above, so a new example is rendered too.
func TestExamplesCoverCI(t *testing.T) {
	files, _ := filepath.Glob("tidemark/ci/*-values.yaml")
	for _, f := range files {
		if !slices.ContainsFunc(examples, func(e struct {
			name, file string
			kinds      []string
			mode       string
			replicas   int32
		}) bool {
			return e.file == f
		}) {
			t.Errorf("%s is not rendered by the tests: add it to examples", f)
		}
	}
}

// TestRenderExamples renders each example, decodes every object strictly, and checks the objects each must have
// and how they refer to each other: selectors, ports, probes, the config mount, the Secrets as files.
func TestRenderExamples(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			files, err := render(t, ex.file, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := decode(t, files)
			if !reflect.DeepEqual(r.kinds, ex.kinds) {
				t.Fatalf("objects %v, want %v", r.kinds, ex.kinds)
			}
			dep, svc, cm := r.deps[0], r.svcs[0], r.cms[0]
			pod := dep.Spec.Template
			if dep.Spec.Replicas == nil || *dep.Spec.Replicas != ex.replicas {
				t.Errorf("replicas %v, want %d", dep.Spec.Replicas, ex.replicas)
			}
			if got := pod.Labels["app.kubernetes.io/component"]; got != ex.mode {
				t.Errorf("component %q, want %q", got, ex.mode)
			}
			if !selects(dep.Spec.Selector.MatchLabels, pod.Labels) || !selects(svc.Spec.Selector, pod.Labels) {
				t.Errorf("Deployment selector %v or Service selector %v does not select the pods %v", dep.Spec.Selector.MatchLabels,
					svc.Spec.Selector, pod.Labels)
			}
			c := pod.Spec.Containers[0]
			if len(c.Ports) != 1 || c.Ports[0].Name != "http" || svc.Spec.Ports[0].TargetPort.String() != "http" ||
				svc.Spec.Ports[0].Port != c.Ports[0].ContainerPort {
				t.Errorf("container ports %v, Service ports %v: want one port http, the Service's target", c.Ports, svc.Spec.Ports)
			}
			if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "http" {
				t.Errorf("readiness probe %+v, want GET /readyz on http", p)
			}
			if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "http" {
				t.Errorf("liveness probe %+v, want GET /healthz on http", p)
			}
			for _, sm := range r.sms {
				if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) || sm.Spec.Endpoints[0].Port != "http" ||
					sm.Spec.Endpoints[0].Path != "/metrics" {
					t.Errorf("ServiceMonitor %+v does not scrape the Service's http port at /metrics", sm.Spec)
				}
			}
			for _, pdb := range r.pdbs {
				if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.String() != "1" || !selects(pdb.Spec.Selector.MatchLabels, pod.Labels) {
					t.Errorf("PodDisruptionBudget %+v, want minAvailable 1 over the pods", pdb.Spec)
				}
			}
			if fmt.Sprint(c.Args) != "[run --config /etc/tidemark/tidemark.yaml]" || c.VolumeMounts[0].MountPath != "/etc/tidemark" ||
				pod.Spec.Volumes[0].ConfigMap == nil || pod.Spec.Volumes[0].ConfigMap.Name != cm.Name {
				t.Errorf("args %v, mounts %v: want run --config on the ConfigMap %s", c.Args, c.VolumeMounts, cm.Name)
			}
			if pod.Annotations["prometheus.io/port"] != fmt.Sprint(c.Ports[0].ContainerPort) {
				t.Errorf("prometheus.io/port %q is not the container port", pod.Annotations["prometheus.io/port"])
			}
			var id *corev1.EnvVar
			for i := range c.Env {
				if c.Env[i].Name == "TIDEMARK_INSTANCE_ID" {
					id = &c.Env[i]
				}
				if c.Env[i].ValueFrom != nil && c.Env[i].ValueFrom.SecretKeyRef != nil {
					t.Errorf("env %s takes a secret: mount it as a file", c.Env[i].Name)
				}
			}
			if id == nil || id.ValueFrom == nil || id.ValueFrom.FieldRef == nil || id.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("TIDEMARK_INSTANCE_ID %+v, want the pod name", id)
			}
			if sc := pod.Spec.SecurityContext; sc == nil || sc.FSGroup == nil || sc.RunAsGroup == nil || *sc.FSGroup != *sc.RunAsGroup ||
				sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
				t.Errorf("pod security context %+v: want non-root with fsGroup = runAsGroup (Secret files readable)", sc)
			}
			cfgText := cm.Data["tidemark.yaml"]
			var cfg map[string]any
			if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
				t.Fatal(err)
			}
			if listen := dig(cfg, "http", "listen"); listen != fmt.Sprintf(":%d", c.Ports[0].ContainerPort) {
				t.Errorf("http.listen %v, want the container port %d", listen, c.Ports[0].ContainerPort)
			}
			for _, f := range secretFiles("", cfg) {
				key, path, _ := strings.Cut(f, "=")
				if !inSecret(pod.Spec, c, path) {
					t.Errorf("%s = %s is not inside a mounted Secret volume", key, path)
				}
			}
			if ex.replicas > 1 {
				if dig(cfg, "lag", "election", "enabled") != true {
					t.Errorf("%d replicas without lag.election.enabled", ex.replicas)
				}
				if len(r.pdbs) != 1 {
					t.Errorf("%d replicas without a PodDisruptionBudget", ex.replicas)
				}
				if ru := dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable.String() != "0" || ru.MaxSurge.String() != "1" {
					t.Errorf("rolling update %+v, want maxSurge 1, maxUnavailable 0", ru)
				}
			}
			want := map[string]string{"lag-exporter": "256Mi", "collector": "320Mi"}[ex.mode] // values.yaml resourceDefaults
			if got := c.Resources.Requests.Memory().String(); got != want {
				t.Errorf("memory request %s, want %s (resourceDefaults for %s)", got, want, ex.mode)
			}
			checkConfig(t, cfgText, ex.mode == "collector")
		})
	}
}

// TestPrometheusRule: the PrometheusRule holds exactly the groups of deploy/prometheus/tidemark.rules.yml, and the
// chart's copy of the rules file is byte for byte the shipped one (go test -update copies it).
func TestPrometheusRule(t *testing.T) {
	src, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(chartRules, src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := os.ReadFile(chartRules)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cp, src) {
		t.Fatalf("%s differs from %s: run go test ./deploy/helm -update", chartRules, rulesFile)
	}
	files, err := render(t, "", map[string]any{"prometheusRule": map[string]any{"enabled": true}})
	if err != nil {
		t.Fatal(err)
	}
	r := decode(t, files)
	if len(r.rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(r.rules))
	}
	var want struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := k8syaml.UnmarshalStrict(src, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Groups) == 0 || !reflect.DeepEqual(r.rules[0].Spec.Groups, want.Groups) {
		t.Errorf("PrometheusRule groups differ from %s (%d groups rendered, %d shipped)", rulesFile, len(r.rules[0].Spec.Groups), len(want.Groups))
	}
}

// TestRefusedValues: values the chart refuses, each with a message naming the value to change.
func TestRefusedValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  string
	}{
		{"replicas without election", map[string]any{"replicaCount": 2},
			"replicaCount 2: set config.lag.election.enabled: true"},
		{"a listen address the Service does not use", map[string]any{"config": map[string]any{"http": map[string]any{"listen": ":8080"}}},
			`config.http.listen ":8080": the chart listens on service.port (:9300)`},
		{"a shared probe instance id", map[string]any{"replicaCount": 3, "config": map[string]any{
			"lag":       map[string]any{"election": map[string]any{"enabled": true}},
			"collector": map[string]any{"probe": map[string]any{"instance_id": "one"}}}},
			"config.collector.probe.instance_id is set"},
		{"a Secret mount without its Secret", map[string]any{"secretMounts": []any{map[string]any{"name": "x", "mountPath": "/x"}}},
			"secretMounts[].secretName is required"},
		// values.schema.json: a misspelt key is an error, not silently ignored
		{"a misspelt value", map[string]any{"replicas": 2}, "additional properties 'replicas' not allowed"},
		{"a port name instead of a number", map[string]any{"service": map[string]any{"port": "http"}}, "service/port"},
	} {
		_, err := render(t, "", tc.extra)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestValuesDocumented: every top-level key of values.yaml has a comment above it or is in README.md's table.
func TestValuesDocumented(t *testing.T) {
	b, err := os.ReadFile("tidemark/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("tidemark/README.md")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Content[0]
	for i := 0; i < len(m.Content); i += 2 {
		key := m.Content[i]
		if !strings.Contains(string(readme), "`"+key.Value+"`") {
			t.Errorf("values key %s is not in tidemark/README.md", key.Value)
		}
	}
}

// selects reports whether the selector sel matches labels (and is not empty).
func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

func dig(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

// secretFiles lists the config's *_file keys as "key=path".
func secretFiles(prefix string, m map[string]any) []string {
	var out []string
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			out = append(out, secretFiles(prefix+k+".", sub)...)
		} else if s, ok := v.(string); ok && strings.HasSuffix(k, "_file") {
			out = append(out, prefix+k+"="+s)
		}
	}
	return out
}

// inSecret reports whether path is inside a read-only mount of a Secret volume with mode 0440.
func inSecret(pod corev1.PodSpec, c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") || !m.ReadOnly {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.DefaultMode != nil && *v.Secret.DefaultMode == 0o440 {
				return true
			}
		}
	}
	return false
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// tidemarkBinary builds cmd/tidemark once per test run.
func tidemarkBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tidemark-helm-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "tidemark")
		out, err := exec.Command("go", "build", "-o", binPath, "../../cmd/tidemark").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/tidemark: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// checkConfig runs `tidemark run --config FILE --print-config` on a rendered configuration: the daemon's own loader
// refuses unknown keys and invalid values. The effective configuration it prints has a clickhouse address exactly
// when the chart rendered the collector.
func checkConfig(t *testing.T, text string, collector bool) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tidemark.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tidemarkBinary(t), "run", "--config", p, "--print-config")
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")} // no TIDEMARK_* from the test's environment
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark run refuses the rendered config: %v\n%s\nconfig:\n%s", err, out, text)
	}
	var eff map[string]any
	if err := yaml.Unmarshal(out, &eff); err != nil {
		t.Fatalf("--print-config output: %v\n%s", err, out)
	}
	addr := dig(eff, "clickhouse", "addr")
	if has := addr != nil && fmt.Sprint(addr) != "[]"; has != collector {
		t.Errorf("effective clickhouse.addr %v, want collector mode %v", addr, collector)
	}
}
