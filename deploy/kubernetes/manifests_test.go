package kubernetes_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tidemark/tidemark/internal/testenv"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/tidemark/tidemark/collector"
)

var update = flag.Bool("update", false, "rewrite prometheus-operator/prometheusrule.yaml from deploy/prometheus/tidemark.rules.yml")

const (
	rulesFile          = "../prometheus/tidemark.rules.yml"
	prometheusRuleFile = "prometheus-operator/prometheusrule.yaml"
)

// obj is one parsed manifest, with the file it came from.
type obj struct {
	file string
	m    map[string]any
}

// get walks a path of map keys and list indexes ("spec", "ports", "0", "name") and returns nil where it ends.
func (o obj) get(path ...string) any {
	var cur any = o.m
	for _, p := range path {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

func (o obj) str(path ...string) string { s, _ := o.get(path...).(string); return s }
func (o obj) kind() string              { return o.str("kind") + "/" + o.str("metadata", "name") }

// load parses every YAML document of every *.yaml file under dir (recursively).
func load(t *testing.T, dir string) []obj {
	t.Helper()
	var out []obj
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var m map[string]any
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("parse %s: %w", path, err)
			}
			if m != nil {
				out = append(out, obj{file: path, m: m})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// apiVersions are the API versions each kind must use (the stable ones; the Operator's for its CRDs).
var apiVersions = map[string]string{
	"Namespace": "v1", "ConfigMap": "v1", "Service": "v1", "Deployment": "apps/v1", "CronJob": "batch/v1",
	"ServiceMonitor": "monitoring.coreos.com/v1", "PrometheusRule": "monitoring.coreos.com/v1",
	"PodDisruptionBudget": "policy/v1",
}

func byKind(objs []obj) map[string]obj {
	m := map[string]obj{}
	for _, o := range objs {
		m[o.str("kind")] = o
	}
	return m
}

// TestManifestsRequiredFields: every document is a known kind with its stable apiVersion, a name, the tidemark
// namespace (except the Namespace itself) and the app.kubernetes.io/name label; each kind appears once.
func TestManifestsRequiredFields(t *testing.T) {
	objs := load(t, ".")
	seen := map[string]string{}
	for _, o := range objs {
		k := o.str("kind")
		want, ok := apiVersions[k]
		if !ok {
			t.Errorf("%s: unexpected kind %q", o.file, k)
			continue
		}
		if o.str("apiVersion") != want {
			t.Errorf("%s: %s has apiVersion %q, want %q", o.file, k, o.str("apiVersion"), want)
		}
		if o.str("metadata", "name") == "" {
			t.Errorf("%s: %s without metadata.name", o.file, k)
		}
		if ns := o.str("metadata", "namespace"); k != "Namespace" && ns != "tidemark" {
			t.Errorf("%s: %s in namespace %q, want tidemark", o.file, o.kind(), ns)
		}
		if o.str("metadata", "labels", "app.kubernetes.io/name") != "tidemark" {
			t.Errorf("%s: %s lacks label app.kubernetes.io/name=tidemark", o.file, o.kind())
		}
		if f, dup := seen[k]; dup {
			t.Errorf("%s: second %s (first in %s)", o.file, k, f)
		}
		seen[k] = o.file
	}
	for k := range apiVersions {
		if _, ok := seen[k]; !ok {
			t.Errorf("no %s manifest", k)
		}
	}
}

func labels(v any) map[string]string {
	out := map[string]string{}
	m, _ := v.(map[string]any)
	for k, x := range m {
		out[k], _ = x.(string)
	}
	return out
}

// subset reports whether every label of sel is in lbl with the same value (a selector matching an object).
func subset(sel, lbl map[string]string) bool {
	for k, v := range sel {
		if lbl[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// TestManifestsWiring: the selectors, ports, probes, config mount and arguments refer to each other correctly.
func TestManifestsWiring(t *testing.T) {
	k := byKind(load(t, "."))
	dep, svc, sm, cm := k["Deployment"], k["Service"], k["ServiceMonitor"], k["ConfigMap"]
	podLabels := labels(dep.get("spec", "template", "metadata", "labels"))
	if !subset(labels(dep.get("spec", "selector", "matchLabels")), podLabels) {
		t.Errorf("Deployment selector %v does not match its pod labels %v", dep.get("spec", "selector", "matchLabels"), podLabels)
	}
	if !subset(labels(svc.get("spec", "selector")), podLabels) {
		t.Errorf("Service selector %v does not match the pod labels %v", svc.get("spec", "selector"), podLabels)
	}
	if !subset(labels(sm.get("spec", "selector", "matchLabels")), labels(svc.get("metadata", "labels"))) {
		t.Errorf("ServiceMonitor selector does not match the Service's labels")
	}

	c := obj{file: dep.file, m: dep.get("spec", "template", "spec", "containers", "0").(map[string]any)}
	ports := map[string]int{}
	for i := range c.get("ports").([]any) {
		ports[c.str("ports", strconv.Itoa(i), "name")] = c.get("ports", strconv.Itoa(i), "containerPort").(int)
	}
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		if _, ok := ports[c.str(probe, "httpGet", "port")]; !ok {
			t.Errorf("%s port %q is not a container port %v", probe, c.str(probe, "httpGet", "port"), ports)
		}
	}
	if c.str("readinessProbe", "httpGet", "path") != "/readyz" || c.str("livenessProbe", "httpGet", "path") != "/healthz" {
		t.Errorf("probes must use /readyz and /healthz (cmd/tidemark/run.go)")
	}
	if _, ok := ports[svc.str("spec", "ports", "0", "targetPort")]; !ok {
		t.Errorf("Service targetPort %q is not a container port", svc.str("spec", "ports", "0", "targetPort"))
	}
	if svc.str("spec", "ports", "0", "name") != sm.str("spec", "endpoints", "0", "port") {
		t.Errorf("ServiceMonitor endpoint port %q is not the Service's port name %q", sm.str("spec", "endpoints", "0", "port"), svc.str("spec", "ports", "0", "name"))
	}
	if sm.str("spec", "endpoints", "0", "path") != "/metrics" {
		t.Errorf("ServiceMonitor path %q, want /metrics", sm.str("spec", "endpoints", "0", "path"))
	}

	// The config volume is the ConfigMap, mounted where --config points.
	if got := dep.str("spec", "template", "spec", "volumes", "0", "configMap", "name"); got != cm.str("metadata", "name") {
		t.Errorf("config volume uses ConfigMap %q, want %q", got, cm.str("metadata", "name"))
	}
	args, _ := c.get("args").([]any)
	if len(args) != 3 || args[0] != "run" || args[1] != "--config" {
		t.Fatalf("container args %v, want run --config FILE", args)
	}
	dir, key := filepath.Split(args[2].(string))
	if filepath.Clean(dir) != c.str("volumeMounts", "0", "mountPath") {
		t.Errorf("--config %s is not under the config mount %s", args[2], c.str("volumeMounts", "0", "mountPath"))
	}
	cfgText := cm.str("data", key)
	if cfgText == "" {
		t.Fatalf("ConfigMap has no key %q for --config", key)
	}
	cfg, _ := testenv.RunConfigKeys(t, cfgText)
	listen, _ := cfg["http"].(map[string]any)["listen"].(string)
	if p, _ := strconv.Atoi(listen[strings.LastIndex(listen, ":")+1:]); p != ports["http"] {
		t.Errorf("http.listen %q does not listen on the container port %d", listen, ports["http"])
	}
	if fmt.Sprint(dep.get("spec", "template", "metadata", "annotations", "prometheus.io/port")) != strconv.Itoa(ports["http"]) {
		t.Errorf("prometheus.io/port annotation is not the container port")
	}
}

// TestRetentionCronJob: the retention job runs `tidemark migrate --drop-expired` with the image, ClickHouse address,
// database, user and retention days of the daemon's config, and reads the password from the same Secret.
func TestRetentionCronJob(t *testing.T) {
	k := byKind(load(t, "."))
	cj, dep, cm := k["CronJob"], k["Deployment"], k["ConfigMap"]
	pod := []string{"spec", "jobTemplate", "spec", "template", "spec"}
	c := obj{file: cj.file, m: cj.get(append(pod, "containers", "0")...).(map[string]any)}
	d := obj{file: dep.file, m: dep.get("spec", "template", "spec", "containers", "0").(map[string]any)}
	if c.str("image") != d.str("image") {
		t.Errorf("retention image %q, daemon image %q", c.str("image"), d.str("image"))
	}
	var cfg struct {
		ClickHouse struct {
			Addr          []string `yaml:"addr"`
			Database      string   `yaml:"database"`
			User          string   `yaml:"user"`
			RetentionDays int      `yaml:"retention_days"`
			RollupDays    int      `yaml:"rollup_retention_days"`
		} `yaml:"clickhouse"`
	}
	if err := yaml.Unmarshal([]byte(cm.str("data", "tidemark.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	ch := cfg.ClickHouse
	want := []any{"migrate", "--drop-expired", "--clickhouse-addr=" + strings.Join(ch.Addr, ","), "--database=" + ch.Database,
		"--user=" + ch.User, "--retention-days=" + strconv.Itoa(ch.RetentionDays), "--rollup-retention-days=" + strconv.Itoa(ch.RollupDays)}
	// The password is the same file of the same Secret as the daemon's clickhouse.password_file.
	want = append(want[:5], append([]any{"--password-file=" + cfgPasswordFile(t, cm)}, want[5:]...)...)
	if got, _ := c.get("args").([]any); !reflect.DeepEqual(got, want) {
		t.Errorf("retention args %v\nwant %v (from the daemon's config)", got, want)
	}
	if a, b := secretOf(t, cj, pod, c, cfgPasswordFile(t, cm)), secretOf(t, dep, []string{"spec", "template", "spec"}, d, cfgPasswordFile(t, cm)); a == "" || a != b {
		t.Errorf("retention reads the password from Secret %q, the daemon from %q", a, b)
	}
	if cj.str(append(pod, "restartPolicy")...) != "OnFailure" || cj.str("spec", "concurrencyPolicy") != "Forbid" {
		t.Errorf("retention job must not overlap and must retry on failure")
	}
}

// cfgPasswordFile is clickhouse.password_file of the ConfigMap's config.
func cfgPasswordFile(t *testing.T, cm obj) string {
	t.Helper()
	var cfg struct {
		ClickHouse struct {
			PasswordFile string `yaml:"password_file"`
		} `yaml:"clickhouse"`
	}
	if err := yaml.Unmarshal([]byte(cm.str("data", "tidemark.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg.ClickHouse.PasswordFile
}

// secretOf returns the name of the Secret volume that container c (of the pod spec at podPath in o) mounts over
// path, "" when path is not inside a mounted Secret.
func secretOf(t *testing.T, o obj, podPath []string, c obj, path string) string {
	t.Helper()
	mounts, _ := c.get("volumeMounts").([]any)
	for i := range mounts {
		mp := c.str("volumeMounts", strconv.Itoa(i), "mountPath")
		if !strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/") {
			continue
		}
		name := c.str("volumeMounts", strconv.Itoa(i), "name")
		vols, _ := o.get(append(podPath, "volumes")...).([]any)
		for j := range vols {
			v := append(append([]string{}, podPath...), "volumes", strconv.Itoa(j))
			if o.str(append(v, "name")...) == name {
				return o.str(append(v, "secret", "secretName")...)
			}
		}
	}
	return ""
}

// TestSecretsAreFiles: every secret the daemon's config names (each *_file key) is a file inside a Secret volume
// mounted read-only, readable by the non-root user (mode 0440 with fsGroup = runAsGroup), and no container takes a
// secret through an environment variable (visible in `kubectl describe`, inherited by every child process).
func TestSecretsAreFiles(t *testing.T) {
	k := byKind(load(t, "."))
	dep, cm := k["Deployment"], k["ConfigMap"]
	pod := []string{"spec", "template", "spec"}
	c := obj{file: dep.file, m: dep.get(append(pod, "containers", "0")...).(map[string]any)}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.str("data", "tidemark.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	var files []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for key, sub := range v {
				if s, ok := sub.(string); ok && strings.HasSuffix(key, "_file") {
					files = append(files, prefix+key+"="+s)
				} else {
					walk(prefix+key+".", sub)
				}
			}
		case []any:
			for i, sub := range v {
				walk(strings.TrimSuffix(prefix, ".")+"["+strconv.Itoa(i)+"].", sub)
			}
		}
	}
	walk("", cfg)
	if len(files) < 3 { // clusters[0].kafka.tls.ca_file, .kafka.sasl.password_file, clickhouse.password_file
		t.Fatalf("the shipped config names %d secret files (%v), want the Kafka CA and password and the ClickHouse password", len(files), files)
	}
	for _, f := range files {
		key, path, _ := strings.Cut(f, "=")
		if secretOf(t, dep, pod, c, path) == "" {
			t.Errorf("%s = %s is not inside a mounted Secret volume", key, path)
		}
	}
	for _, o := range []obj{dep, k["CronJob"]} {
		p := pod
		if o.str("kind") == "CronJob" {
			p = []string{"spec", "jobTemplate", "spec", "template", "spec"}
		}
		if g := fmt.Sprint(o.get(append(p, "securityContext", "fsGroup")...)); g != fmt.Sprint(o.get(append(p, "securityContext", "runAsGroup")...)) {
			t.Errorf("%s: fsGroup %s must equal runAsGroup so the non-root user can read the Secret files", o.kind(), g)
		}
		vols, _ := o.get(append(p, "volumes")...).([]any)
		for j := range vols {
			v := append(append([]string{}, p...), "volumes", strconv.Itoa(j))
			if o.get(append(v, "secret")...) == nil {
				continue
			}
			if mode := o.get(append(v, "secret", "defaultMode")...); mode != 0o440 {
				t.Errorf("%s: Secret volume %s mode %v, want 0440 (owner and group read)", o.kind(), o.str(append(v, "name")...), mode)
			}
		}
		containers, _ := o.get(append(p, "containers")...).([]any)
		for i := range containers {
			co := obj{m: containers[i].(map[string]any)}
			envs, _ := co.get("env").([]any)
			for e := range envs {
				if co.get("env", strconv.Itoa(e), "valueFrom", "secretKeyRef") != nil {
					t.Errorf("%s: env %s takes a secret; mount it as a file instead", o.kind(), co.str("env", strconv.Itoa(e), "name"))
				}
			}
			mounts, _ := co.get("volumeMounts").([]any)
			for m := range mounts {
				if co.get("volumeMounts", strconv.Itoa(m), "readOnly") != true {
					t.Errorf("%s: volume mount %s is not read-only", o.kind(), co.str("volumeMounts", strconv.Itoa(m), "mountPath"))
				}
			}
		}
	}
}

// prometheusRule renders the PrometheusRule that wraps the rules file: its groups, comments kept, under spec.
func prometheusRule(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("\ngroups:\n"))
	if i < 0 {
		t.Fatalf("%s has no top-level groups:", rulesFile)
	}
	var out bytes.Buffer
	out.WriteString(`# GENERATED from deploy/prometheus/tidemark.rules.yml by ` + "`go test ./deploy/kubernetes -update`" + `; do not edit.
# Optional, for the Prometheus Operator: Tidemark's alerting and recording rules (docs/alerting.md). Your
# Prometheus's ruleSelector must match these labels (many installs select ` + "`release: <helm release name>`" + `).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: tidemark
  namespace: tidemark
  labels:
    app.kubernetes.io/name: tidemark
spec:
`)
	for _, line := range strings.SplitAfter(string(b[i+1:]), "\n") {
		if strings.TrimSpace(line) == "" {
			out.WriteString(line)
			continue
		}
		out.WriteString("  " + line)
	}
	return out.Bytes()
}

// TestPrometheusRuleMatchesRules: the PrometheusRule is the rules file, byte for byte under spec, and parses to
// the same groups.
func TestPrometheusRuleMatchesRules(t *testing.T) {
	want := prometheusRule(t)
	if *update {
		if err := os.WriteFile(prometheusRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with %s: run go test ./deploy/kubernetes -update", prometheusRuleFile, rulesFile)
	}
	var pr struct {
		Spec struct {
			Groups any `yaml:"groups"`
		} `yaml:"spec"`
	}
	var rules struct {
		Groups any `yaml:"groups"`
	}
	b, _ := os.ReadFile(rulesFile)
	if err := yaml.Unmarshal(got, &pr); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	if rules.Groups == nil || !reflect.DeepEqual(pr.Spec.Groups, rules.Groups) {
		t.Fatal("PrometheusRule spec.groups differ from the rules file's groups")
	}
}

// TestManifestsStrictSchema decodes each core manifest into its Kubernetes API type with unknown fields refused, so a
// misspelt or misplaced field (which kubectl would reject, or worse, a lenient tool would drop) fails here.
func TestManifestsStrictSchema(t *testing.T) {
	types := map[string]func() any{
		"Namespace":           func() any { return &corev1.Namespace{} },
		"ConfigMap":           func() any { return &corev1.ConfigMap{} },
		"Service":             func() any { return &corev1.Service{} },
		"Deployment":          func() any { return &appsv1.Deployment{} },
		"CronJob":             func() any { return &batchv1.CronJob{} },
		"PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
	}
	n := 0
	for _, o := range load(t, ".") {
		mk, ok := types[o.str("kind")]
		if !ok {
			continue // the Prometheus Operator's kinds: checked by the generic tests only
		}
		b, err := yaml.Marshal(o.m)
		if err != nil {
			t.Fatal(err)
		}
		if err := k8syaml.UnmarshalStrict(b, mk()); err != nil {
			t.Errorf("%s: %s does not match the Kubernetes API: %v", o.file, o.kind(), err)
		}
		n++
	}
	if n != len(types) {
		t.Errorf("decoded %d core manifests, want %d", n, len(types))
	}
}

// TestReplicasManifests: two replicas that roll one at a time with no gap (maxSurge 1, maxUnavailable 0),
// a PodDisruptionBudget over the same pods keeping one available, each pod's instance id its own name (downward
// API, the variable the collector reads), and the lag-exporter election on in the config (else both replicas would
// export and store the same lag). Decoded with the Kubernetes API types, so a misspelt field fails here.
func TestReplicasManifests(t *testing.T) {
	k := byKind(load(t, "."))
	decode := func(o obj, into any) {
		t.Helper()
		b, err := yaml.Marshal(o.m)
		if err != nil {
			t.Fatal(err)
		}
		if err := k8syaml.UnmarshalStrict(b, into); err != nil {
			t.Fatalf("%s: %v", o.file, err)
		}
	}
	var dep appsv1.Deployment
	var pdb policyv1.PodDisruptionBudget
	decode(k["Deployment"], &dep)
	decode(k["PodDisruptionBudget"], &pdb)
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("Deployment replicas %v, want 2", dep.Spec.Replicas)
	}
	ru := dep.Spec.Strategy.RollingUpdate
	if dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxSurge == nil || ru.MaxSurge.String() != "1" ||
		ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "0" {
		t.Errorf("strategy %+v, want RollingUpdate with maxSurge 1, maxUnavailable 0", dep.Spec.Strategy)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.String() != "1" || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("PodDisruptionBudget minAvailable %v maxUnavailable %v, want minAvailable 1 only", pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable)
	}
	if pdb.Spec.Selector == nil || !subset(pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) || len(pdb.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("PodDisruptionBudget selector %v does not select the Deployment's pods %v", pdb.Spec.Selector, dep.Spec.Template.Labels)
	}
	var id *corev1.EnvVar
	for i, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.Name == collector.InstanceIDEnv {
			id = &dep.Spec.Template.Spec.Containers[0].Env[i]
		}
	}
	if id == nil || id.ValueFrom == nil || id.ValueFrom.FieldRef == nil || id.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("container env %s = %+v, want the pod name (fieldRef metadata.name)", collector.InstanceIDEnv, id)
	}
	_, cluster := testenv.RunConfigKeys(t, k["ConfigMap"].str("data", "tidemark.yaml"))
	lag, _ := cluster["lag"].(map[string]any)
	el, _ := lag["election"].(map[string]any)
	if el["enabled"] != true {
		t.Errorf("lag.election.enabled = %v, want true with two replicas", el["enabled"])
	}
	coll, _ := cluster["collector"].(map[string]any)
	probe, _ := coll["probe"].(map[string]any)
	if _, set := probe["instance_id"]; set {
		t.Errorf("collector.probe.instance_id is set in the ConfigMap: every pod would share it; the pod name is the id")
	}
}
