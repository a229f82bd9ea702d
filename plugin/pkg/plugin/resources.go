package plugin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"

	"github.com/tidemark/tidemark/internal/store/query"
)

// ListWindow is how far back template-variable lists look for names.
const ListWindow = 7 * 24 * time.Hour

// CallResource serves GET topics, groups, hosts and clusters (optionally ?cluster=…&topic=…&group=…, comma-separated) as
// {"values": [...]} for template variables; errors as {"error": "..."} with a 4xx/5xx status.
func (d *Datasource) CallResource(ctx context.Context, req *backend.CallResourceRequest, sender backend.CallResourceResponseSender) error {
	kind := query.ListKind(strings.Trim(req.Path, "/"))
	switch kind {
	case query.ListTopics, query.ListGroups, query.ListHosts, query.ListClusters:
	default:
		return sendJSON(sender, http.StatusNotFound, map[string]string{
			"error": "unknown resource " + req.Path + ": use topics, groups, hosts or clusters"})
	}
	if req.Method != "" && req.Method != http.MethodGet {
		return sendJSON(sender, http.StatusMethodNotAllowed, map[string]string{"error": "use GET"})
	}
	params, err := url.ParseQuery(queryPart(req.URL))
	if err != nil {
		return sendJSON(sender, http.StatusBadRequest, map[string]string{"error": "malformed query string: " + err.Error()})
	}
	var f query.Filter
	if f.Topics, err = splitFilter("topic", params.Get("topic"), topicName); err == nil {
		f.Groups, err = splitFilter("group", params.Get("group"), nil)
	}
	if err == nil {
		f.Clusters, err = splitFilter("cluster", params.Get("cluster"), nil)
	}
	if err != nil {
		return sendJSON(sender, http.StatusBadRequest, map[string]string{"error": err.Error()})
	}
	r, err := d.open(ctx)
	if err == nil {
		var values []string
		values, err = r.List(ctx, query.ListQuery{Kind: kind, Since: d.now().Add(-ListWindow), Filter: f})
		if err == nil {
			return sendJSON(sender, http.StatusOK, map[string][]string{"values": values})
		}
	}
	status, _, msg := explain(err, d.settings)
	return sendJSON(sender, int(status), map[string]string{"error": msg})
}

func queryPart(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[i+1:]
	}
	return ""
}

func sendJSON(sender backend.CallResourceResponseSender, status int, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return sender.Send(&backend.CallResourceResponse{
		Status:  status,
		Headers: map[string][]string{"Content-Type": {"application/json"}},
		Body:    b,
	})
}
