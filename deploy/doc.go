// Package deploy holds no Go code of its own: it is where the deployment
// files live (Dockerfile, systemd unit, Grafana dashboard, Prometheus
// rules), and its tests check them against the real binaries and a live
// server's /metrics.
package deploy
