// Package kubeclient holds how spawnerd talks to the API server: the
// client configuration its typed clients share.
package kubeclient

import (
	"net"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// Protobuf returns a copy of cfg that asks for and sends Kubernetes'
// protobuf encoding. Decoding a list of 10,000 pods or a stream of watch
// events costs several times less CPU in protobuf than in JSON, and that
// CPU is shared with the API server on a small control plane. Only the
// built-in types have a protobuf form: dynamic clients for custom
// resources must keep a JSON config.
func Protobuf(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.ContentType = runtime.ContentTypeProtobuf
	out.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return out
}

// Uncompressed returns a copy of cfg whose requests do not offer gzip
// (client-go's transport offers it by default): spawnerd's
// --kube-compression=false. Since Kubernetes 1.37 the API server gzips a
// watch opened as a streamed list, which is how an informer starts, for as
// long as the watch stays open, one gzip stream per flush. That costs CPU
// on both sides, but it is what lets a watch keep up under load: the API
// server's HTTP/2 handler buffers 4 KB of a response, so each uncompressed
// pod event (about 4.4 KB in protobuf) is a hand-off of its own to the
// connection's writer goroutine, while gzipped events, several times
// smaller, share them. With the API server's cores busy each hand-off waits
// for one: in the stop benchmark an uncompressed watch trailed a gzipped one
// of the same API server by 0.5-4.6 s at p99.
func Uncompressed(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.DisableCompression = true
	return out
}

// OwnConnection returns a copy of cfg whose clients get a transport, and so
// a connection to the API server, of their own. client-go otherwise shares
// one transport, one HTTP/2 connection, among every config with the same
// TLS settings, whatever their rate limits. The API server (Go's HTTP/2
// server) writes a connection's frames one at a time, so each flush of a
// watch waits its turn among the answers to that client's other requests:
// a burst of writes on the connection of a watch delays the watch.
func OwnConnection(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	// A dial function of its own is what keeps client-go from reusing a
	// cached transport; these are net/http's default dial settings.
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	out.Dial = d.DialContext
	return out
}
