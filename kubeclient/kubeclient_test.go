package kubeclient

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

func TestProtobufLeavesTheOriginal(t *testing.T) {
	base := &rest.Config{Host: "https://example.invalid", QPS: 5}
	pb := Protobuf(base)
	if pb.ContentType != runtime.ContentTypeProtobuf {
		t.Errorf("ContentType = %q, want %q", pb.ContentType, runtime.ContentTypeProtobuf)
	}
	if pb.AcceptContentTypes != "application/vnd.kubernetes.protobuf,application/json" {
		t.Errorf("AcceptContentTypes = %q", pb.AcceptContentTypes)
	}
	if base.ContentType != "" || base.AcceptContentTypes != "" {
		t.Errorf("the original config changed: %q / %q", base.ContentType, base.AcceptContentTypes)
	}
	if pb.Host != base.Host || pb.QPS != base.QPS {
		t.Errorf("the copy lost settings: %+v", pb)
	}
}
