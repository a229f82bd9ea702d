// Package kubernetes holds no Go code: it is where Tidemark's plain Kubernetes manifests live (Namespace, ConfigMap,
// Deployment of `tidemark run`, Service for /metrics, and in prometheus-operator/ an optional ServiceMonitor and a
// PrometheusRule generated from deploy/prometheus/tidemark.rules.yml). Its tests parse every manifest and check the
// required fields and how the objects refer to each other. docs/deploy.md explains how to apply them.
package kubernetes
