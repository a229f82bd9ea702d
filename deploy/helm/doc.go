// Package helm holds no Go code: deploy/helm/tidemark is Tidemark's Helm chart. Its tests render the chart with
// Helm's own packages (chart loader, values coalescing, template engine) for the default values and every example in
// tidemark/ci/, decode every rendered object strictly into its Kubernetes (or Prometheus Operator) API type, check how
// the objects refer to each other, and run `tidemark run --print-config` on each rendered configuration.
package helm
