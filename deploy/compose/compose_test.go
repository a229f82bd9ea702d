package compose_test

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tidemark/tidemark/internal/testenv"
)

// composeFile is the part of the Compose specification these tests read.
type composeFile struct {
	Name     string             `yaml:"name"`
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

type service struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   yaml.Node         `yaml:"depends_on"` // a list of names or a map of name → condition
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

func (s service) dependsOn() []string {
	var out []string
	switch s.DependsOn.Kind {
	case yaml.SequenceNode:
		for _, n := range s.DependsOn.Content {
			out = append(out, n.Value)
		}
	case yaml.MappingNode:
		for i := 0; i < len(s.DependsOn.Content); i += 2 {
			out = append(out, s.DependsOn.Content[i].Value)
		}
	}
	return out
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	readYAML(t, "compose.yaml", &c)
	return c
}

// TestComposeServices: the six services exist with an image; dependencies, named volumes and bind mounts refer to
// things that exist (the plugin's dist folder is a build output: its plugin.json source is checked instead).
func TestComposeServices(t *testing.T) {
	c := readCompose(t)
	var names []string
	for n := range c.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"clickhouse", "grafana", "jaeger", "kafka", "prometheus", "tidemark"}; !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}
	usedVolumes := map[string]bool{}
	for name, s := range c.Services {
		if s.Image == "" {
			t.Errorf("service %s has no image", name)
		}
		for _, d := range s.dependsOn() {
			if _, ok := c.Services[d]; !ok {
				t.Errorf("service %s depends on unknown service %s", name, d)
			}
		}
		for _, v := range s.Volumes {
			src, target, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(target, "/") {
				t.Errorf("service %s volume %q: target must be an absolute path", name, v)
			}
			if !strings.HasPrefix(src, ".") {
				usedVolumes[src] = true
				if _, ok := c.Volumes[src]; !ok {
					t.Errorf("service %s uses volume %s, which is not declared", name, src)
				}
				continue
			}
			if src == "../../plugin/dist" {
				continue // built by `make plugin`
			}
			if _, err := os.Stat(src); err != nil {
				t.Errorf("service %s mounts %s: %v", name, src, err)
			}
		}
	}
	for v := range c.Volumes {
		if !usedVolumes[v] {
			t.Errorf("volume %s is declared but unused", v)
		}
	}
}

// TestComposeTidemark: the image builds ./cmd/tidemark with the module's Go version, the command reads the mounted
// config, whose keys `tidemark run` knows and whose addresses are the compose services; Prometheus scrapes its port.
func TestComposeTidemark(t *testing.T) {
	c := readCompose(t)
	tm := c.Services["tidemark"]
	if tm.Build == nil {
		t.Fatal("tidemark has no build section")
	}
	df := filepath.Join(tm.Build.Context, tm.Build.Dockerfile)
	b, err := os.ReadFile(df)
	if err != nil {
		t.Fatalf("tidemark's Dockerfile: %v", err)
	}
	dockerfile := string(b)
	if !strings.Contains(dockerfile, "go build") || !strings.Contains(dockerfile, "./cmd/tidemark") {
		t.Errorf("%s does not build ./cmd/tidemark", df)
	}
	gomod, err := os.ReadFile(filepath.Join(tm.Build.Context, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if goVer == nil || !strings.Contains(dockerfile, "FROM golang:"+string(goVer[1])) {
		t.Errorf("%s must build with the Go version of go.mod (%s)", df, goVer)
	}
	if !slices.Equal(tm.Command[:2], []string{"run", "--config"}) || len(tm.Command) != 3 {
		t.Fatalf("tidemark command %v, want run --config FILE", tm.Command)
	}
	mounted := ""
	for _, v := range tm.Volumes {
		parts := strings.Split(v, ":")
		if parts[1] == tm.Command[2] {
			mounted = parts[0]
		}
	}
	if mounted == "" {
		t.Fatalf("--config %s is not a mounted file", tm.Command[2])
	}
	text, err := os.ReadFile(mounted)
	if err != nil {
		t.Fatal(err)
	}
	cfg, cluster := testenv.RunConfigKeys(t, string(text))
	kafka, _ := cluster["kafka"].(map[string]any)
	if brokers, _ := kafka["brokers"].([]any); len(brokers) != 1 || brokers[0] != "kafka:9092" {
		t.Errorf("kafka.brokers %v, want the kafka service's PLAINTEXT listener kafka:9092", brokers)
	}
	if !strings.Contains(c.Services["kafka"].Environment["KAFKA_ADVERTISED_LISTENERS"], "PLAINTEXT://kafka:9092") {
		t.Errorf("kafka does not advertise kafka:9092")
	}
	ch, _ := cfg["clickhouse"].(map[string]any)
	if addr, _ := ch["addr"].([]any); len(addr) != 1 || addr[0] != "clickhouse:9000" {
		t.Errorf("clickhouse.addr %v, want clickhouse:9000", addr)
	}
	if tm.Environment["TIDEMARK_CLICKHOUSE__PASSWORD"] == "" {
		t.Error("tidemark gets no ClickHouse password (TIDEMARK_CLICKHOUSE__PASSWORD)")
	}
	listen := cfg["http"].(map[string]any)["listen"].(string)
	port := listen[strings.LastIndex(listen, ":")+1:]
	if !slices.Contains(tm.Ports, port+":"+port) {
		t.Errorf("tidemark listens on %s but publishes %v", port, tm.Ports)
	}
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "prometheus.yml", &prom)
	if len(prom.ScrapeConfigs) != 1 || prom.ScrapeConfigs[0].StaticConfigs[0].Targets[0] != "tidemark:"+port {
		t.Errorf("Prometheus scrapes %+v, want tidemark:%s", prom.ScrapeConfigs, port)
	}
	// The rule glob, read inside the container, must find the rules file through the mount of ../prometheus.
	rulesMount := ""
	for _, v := range c.Services["prometheus"].Volumes {
		if parts := strings.Split(v, ":"); parts[0] == "../prometheus" {
			rulesMount = parts[1]
		}
	}
	if len(prom.RuleFiles) != 1 || rulesMount == "" {
		t.Fatalf("rule_files %v, ../prometheus mounted at %q", prom.RuleFiles, rulesMount)
	}
	dir, glob := filepath.Split(prom.RuleFiles[0])
	if filepath.Clean(dir) != rulesMount {
		t.Errorf("rule_files %s is not under the rules mount %s", prom.RuleFiles[0], rulesMount)
	}
	if m, _ := filepath.Glob(filepath.Join("../prometheus", glob)); len(m) == 0 || slices.ContainsFunc(m, func(s string) bool { return strings.HasSuffix(s, ".test.yml") }) {
		t.Errorf("rule glob %s matches %v: want the rules file and not its unit tests", glob, m)
	}
}

// TestComposeGrafanaAndClickHouse: the plugin is mounted under its id and allowed unsigned, the provisioned
// datasource's variables are set, and the ClickHouse users it and Tidemark log in as exist.
func TestComposeGrafanaAndClickHouse(t *testing.T) {
	c := readCompose(t)
	g := c.Services["grafana"]
	b, err := os.ReadFile("../../plugin/src/plugin.json")
	if err != nil {
		t.Fatal(err)
	}
	var plugin struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &plugin); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(g.Volumes, "../../plugin/dist:/var/lib/grafana/plugins/"+plugin.ID+":ro") {
		t.Errorf("grafana does not mount plugin/dist as plugin %s: %v", plugin.ID, g.Volumes)
	}
	if g.Environment["GF_PLUGINS_ALLOW_LOADING_UNSIGNED_PLUGINS"] != plugin.ID {
		t.Errorf("unsigned plugin %s is not allowed", plugin.ID)
	}
	ds, err := os.ReadFile("../grafana/provisioning/datasources/tidemark.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Z_]+)\}`).FindAllStringSubmatch(string(ds), -1) {
		if g.Environment[m[1]] == "" {
			t.Errorf("the datasource provisioning reads ${%s}, which grafana's environment does not set", m[1])
		}
	}
	var dsDoc struct {
		Datasources []struct {
			JSONData struct {
				Username string `yaml:"username"`
			} `yaml:"jsonData"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(ds, &dsDoc); err != nil {
		t.Fatal(err)
	}

	xb, err := os.ReadFile("clickhouse-users.xml")
	if err != nil {
		t.Fatal(err)
	}
	var users struct {
		Users struct {
			Any []struct {
				XMLName  xml.Name
				Password struct {
					FromEnv string `xml:"from_env,attr"`
				} `xml:"password"`
				Profile string `xml:"profile"`
			} `xml:",any"`
		} `xml:"users"`
		Profiles struct {
			Any []struct {
				XMLName  xml.Name
				Readonly int `xml:"readonly"`
			} `xml:",any"`
		} `xml:"profiles"`
	}
	if err := xml.Unmarshal(xb, &users); err != nil {
		t.Fatalf("parse clickhouse-users.xml: %v", err)
	}
	var tmCfg map[string]any
	readYAML(t, "tidemark.yaml", &tmCfg)
	want := map[string]bool{tmCfg["clickhouse"].(map[string]any)["user"].(string): false, dsDoc.Datasources[0].JSONData.Username: false}
	env := c.Services["clickhouse"].Environment
	for _, u := range users.Users.Any {
		if _, ok := want[u.XMLName.Local]; ok {
			want[u.XMLName.Local] = true
		}
		if u.Password.FromEnv == "" || env[u.Password.FromEnv] == "" {
			t.Errorf("ClickHouse user %s: password from_env %q is not set in the clickhouse service", u.XMLName.Local, u.Password.FromEnv)
		}
		if u.XMLName.Local == dsDoc.Datasources[0].JSONData.Username {
			ro := -1
			for _, p := range users.Profiles.Any {
				if p.XMLName.Local == u.Profile {
					ro = p.Readonly
				}
			}
			if ro != 2 {
				t.Errorf("Grafana's user %s has profile %s with readonly=%d, want 2 (reads only, settings allowed)", u.XMLName.Local, u.Profile, ro)
			}
		}
	}
	for u, ok := range want {
		if !ok {
			t.Errorf("ClickHouse user %s is not defined in clickhouse-users.xml", u)
		}
	}
}

// TestComposeKnownKeys decodes compose.yaml with unknown keys refused into the subset of the Compose specification
// it uses, so a misspelt key (enviroment, depends-on), which compose would reject or ignore, fails here. A new key
// from the specification needs adding below.
func TestComposeKnownKeys(t *testing.T) {
	type strict struct {
		Name     string `yaml:"name"`
		Services map[string]struct {
			Image string `yaml:"image"`
			Build struct {
				Context    string `yaml:"context"`
				Dockerfile string `yaml:"dockerfile"`
			} `yaml:"build"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			Ports       []string          `yaml:"ports"`
			DependsOn   yaml.Node         `yaml:"depends_on"`
			Restart     string            `yaml:"restart"`
			Ulimits     map[string]struct {
				Soft int `yaml:"soft"`
				Hard int `yaml:"hard"`
			} `yaml:"ulimits"`
			Healthcheck struct {
				Test     []string `yaml:"test"`
				Interval string   `yaml:"interval"`
				Timeout  string   `yaml:"timeout"`
				Retries  int      `yaml:"retries"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	f, err := os.Open("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var c strict
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	restart := []string{"", "no", "always", "on-failure", "unless-stopped"}
	for name, s := range c.Services {
		if !slices.Contains(restart, s.Restart) {
			t.Errorf("service %s: restart %q is not one of %v", name, s.Restart, restart)
		}
		if s.Healthcheck.Test != nil && (s.Healthcheck.Test[0] != "CMD" || s.Healthcheck.Retries < 1) {
			t.Errorf("service %s: healthcheck %v must be a CMD list with retries", name, s.Healthcheck.Test)
		}
		var cond struct {
			Condition string `yaml:"condition"`
		}
		if s.DependsOn.Kind == yaml.MappingNode {
			for i := 1; i < len(s.DependsOn.Content); i += 2 {
				if err := s.DependsOn.Content[i].Decode(&cond); err != nil || !slices.Contains([]string{"service_started", "service_healthy", "service_completed_successfully"}, cond.Condition) {
					t.Errorf("service %s: depends_on %s condition %q", name, s.DependsOn.Content[i-1].Value, cond.Condition)
				}
				if cond.Condition == "service_healthy" && c.Services[s.DependsOn.Content[i-1].Value].Healthcheck.Test == nil {
					t.Errorf("service %s waits for %s to be healthy, which has no healthcheck", name, s.DependsOn.Content[i-1].Value)
				}
			}
		}
	}
}
