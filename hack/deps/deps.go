// Package deps pins module dependencies while the packages that use them are written.
package deps

import (
	_ "github.com/go-logr/zapr"
	_ "github.com/golang-jwt/jwt/v5"
	_ "github.com/gorilla/websocket"
	_ "github.com/labstack/echo/v4"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go.uber.org/zap"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "k8s.io/klog/v2"
	_ "k8s.io/utils/clock"
	_ "sigs.k8s.io/yaml"
)

