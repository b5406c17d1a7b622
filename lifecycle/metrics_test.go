package lifecycle

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCountRequestsCountsWatchesByResource(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	client := &http.Client{Transport: CountRequests(reg)(http.DefaultTransport)}
	for _, path := range []string{
		"/api/v1/namespaces/ns1/pods?labelSelector=a%3Db&watch=true&resourceVersion=5",
		"/api/v1/namespaces/ns1/pods?watch=true", // the informer's watch, opened again
		"/api/v1/namespaces/ns1/events?fieldSelector=involvedObject.kind%3DPod&watch=1",
		"/api/v1/namespaces/ns1/events?watch=true",
		"/api/v1/namespaces/ns1/pods?limit=500",           // a LIST
		"/api/v1/namespaces/ns1/pods?watch=false",         // a LIST too
		"/api/v1/namespaces/ns1/pods?fieldSelector=watch", // not the watch parameter
	} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := `
# HELP spawner_kube_watches_opened_total Kubernetes API watches opened, by resource: more than the informers' count means watches that ended and were opened again.
# TYPE spawner_kube_watches_opened_total counter
spawner_kube_watches_opened_total{resource="events"} 2
spawner_kube_watches_opened_total{resource="pods"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "spawner_kube_watches_opened_total"); err != nil {
		t.Error(err)
	}
	want = `
# HELP spawner_kube_api_requests_total Kubernetes API requests by HTTP method (POST, PUT, PATCH, DELETE are writes), Lease traffic excepted.
# TYPE spawner_kube_api_requests_total counter
spawner_kube_api_requests_total{method="GET"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "spawner_kube_api_requests_total"); err != nil {
		t.Error(err)
	}
}
