// Package compose holds no Go code: it is where Tidemark's Docker Compose set-up lives (compose.yaml with Kafka,
// ClickHouse, `tidemark run`, Prometheus and Grafana; the Dockerfile of Tidemark's image; the configuration files
// the services mount). There is no container engine on the project's machines, so its tests validate the files by
// parsing them and checking how they refer to each other and to the repository. docs/deploy.md explains them.
package compose
