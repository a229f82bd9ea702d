package dashboards

// A minimal model of Grafana's dashboard JSON (schemaVersion 39): only the fields these dashboards set.

// Dashboard is one dashboard file.
type Dashboard struct {
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	Description   string     `json:"description"`
	Tags          []string   `json:"tags"`
	Editable      bool       `json:"editable"`
	SchemaVersion int        `json:"schemaVersion"`
	Time          TimeRange  `json:"time"`
	Refresh       string     `json:"refresh"`
	Templating    Templating `json:"templating"`
	Panels        []Panel    `json:"panels"`
	Links         []Link     `json:"links"`
}

// TimeRange is the default time range.
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Templating holds the dashboard's variables.
type Templating struct {
	List []Variable `json:"list"`
}

// Variable is a template variable.
type Variable struct {
	Name       string         `json:"name"`
	Label      string         `json:"label,omitempty"`
	Type       string         `json:"type"` // datasource, query, constant, textbox
	Query      any            `json:"query,omitempty"`
	Definition string         `json:"definition,omitempty"`
	Datasource *DatasourceRef `json:"datasource,omitempty"`
	Multi      bool           `json:"multi,omitempty"`
	IncludeAll bool           `json:"includeAll,omitempty"`
	AllValue   string         `json:"allValue,omitempty"`
	Refresh    int            `json:"refresh,omitempty"` // 1: on dashboard load, 2: on time range change
	Current    map[string]any `json:"current,omitempty"`
	Hide       int            `json:"hide,omitempty"`
}

// DatasourceRef points at a datasource, usually through a datasource variable.
type DatasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Panel is one panel.
type Panel struct {
	ID              int              `json:"id"`
	Type            string           `json:"type"`
	Title           string           `json:"title"`
	Description     string           `json:"description,omitempty"`
	GridPos         GridPos          `json:"gridPos"`
	Datasource      *DatasourceRef   `json:"datasource,omitempty"`
	Targets         []map[string]any `json:"targets,omitempty"`
	FieldConfig     FieldConfig      `json:"fieldConfig"`
	Options         map[string]any   `json:"options,omitempty"`
	Transformations []map[string]any `json:"transformations,omitempty"`
	Collapsed       *bool            `json:"collapsed,omitempty"`
	Panels          []Panel          `json:"panels,omitempty"`
}

// GridPos places a panel on the 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// FieldConfig holds field defaults and overrides.
type FieldConfig struct {
	Defaults  map[string]any   `json:"defaults"`
	Overrides []map[string]any `json:"overrides"`
}

// Link is a dashboard link.
type Link struct {
	Title    string   `json:"title"`
	Type     string   `json:"type"`
	Tags     []string `json:"tags"`
	AsDrop   bool     `json:"asDropdown"`
	Keep     bool     `json:"keepTime"`
	Vars     bool     `json:"includeVars"`
	TargetBl bool     `json:"targetBlank"`
}
