// Command gpx_tidemark is the backend of Tidemark's Grafana datasource; Grafana starts it and talks to it over gRPC.
package main

import (
	"os"

	"github.com/grafana/grafana-plugin-sdk-go/backend/datasource"
	"github.com/grafana/grafana-plugin-sdk-go/backend/log"

	"github.com/tidemark/tidemark/plugin/pkg/plugin"
)

func main() {
	if err := datasource.Manage(plugin.ID, plugin.NewDatasource, datasource.ManageOpts{}); err != nil {
		log.DefaultLogger.Error("tidemark datasource stopped", "error", err.Error())
		os.Exit(1)
	}
}
