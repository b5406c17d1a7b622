//go:build tools

// Package tools pins the etcd server the dev cluster runs.
package tools

import _ "go.etcd.io/etcd/server/v3"
