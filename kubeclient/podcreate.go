package kubeclient

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// metadataAccept asks the API server to answer with the object's metadata
// alone (PartialObjectMetadata), in protobuf, else JSON; the plain JSON at
// the end is what an error (a Status) is written in.
const metadataAccept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1," +
	"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// PodCreator creates pods and reads back only their metadata. A spawn needs
// the created pod's UID and name; the whole pod the API server answers a
// plain create with costs it an encode and spawnerd a decode, about a third
// of the start handler's CPU in a spawn storm.
type PodCreator struct {
	client  rest.Interface
	decoder runtime.Decoder
}

// NewPodCreator returns a PodCreator that writes through client, the core
// v1 REST client of a clientset (CoreV1().RESTClient()).
func NewPodCreator(client rest.Interface) *PodCreator {
	scheme := runtime.NewScheme()
	metav1.AddMetaToScheme(scheme)
	// A server that ignores the as= parameter answers with the pod.
	_ = corev1.AddToScheme(scheme)
	return &PodCreator{client: client, decoder: serializer.NewCodecFactory(scheme).UniversalDeserializer()}
}

// Create creates pod in its namespace and returns the metadata the API
// server stored. Its errors are the API server's (apierrors.IsAlreadyExists
// and the like work on them).
func (c *PodCreator) Create(ctx context.Context, pod *corev1.Pod) (metav1.Object, error) {
	res := c.client.Post().Namespace(pod.Namespace).Resource("pods").
		SetHeader("Accept", metadataAccept).Body(pod).Do(ctx)
	// Error, not Raw's error: it decodes the API server's Status, so that
	// a refusal keeps its reason and message (Raw's is a generic one).
	if err := res.Error(); err != nil {
		return nil, err
	}
	raw, err := res.Raw()
	if err != nil {
		return nil, err
	}
	obj, _, err := c.decoder.Decode(raw, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decoding the created pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("the created pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return m, nil
}
