//go:build tools

// Package tools pins the helm CLI that renders and checks the deployment chart.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
