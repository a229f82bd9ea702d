// Package plugin is the backend of Tidemark's Grafana datasource: it decodes and validates the datasource settings
// (settings.go), parses the query model shared with the TypeScript frontend (query.go, docs/plugin.md), runs each
// query through internal/store/query, and turns the answers into data frames (frames.go). Resource calls list topics,
// groups and hosts for template variables (resources.go).
//
// Every error a user can cause or fix (settings, a malformed query, a refused login, an unreachable server, an old
// schema, a query the server stopped) is returned as a downstream error with a message saying what to change; only
// this package's own failures are plugin errors (errors.go).
//
// Main types: Datasource (NewDatasource), Settings (LoadSettings), Query (ParseQuery).
package plugin
