package reservationstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/dsmlp/spawner/reservation"
)

// ErrIDTaken means a lease's ID belongs to another record: the engine
// mints a new one next cycle.
var ErrIDTaken = errors.New("reservation id already used by another record")

// ErrNotFound means no reservation has the ID.
var ErrNotFound = errors.New("reservation not found")

// Store reads reservations from an informer cache and writes them to the
// API server.
type Store struct {
	client   dynamic.ResourceInterface
	informer cache.SharedIndexInformer
}

// New makes a store; run its Informer before use.
func New(client dynamic.Interface, resync time.Duration) *Store {
	inf := dynamicinformer.NewFilteredDynamicInformer(client, Resource, metav1.NamespaceAll, resync, cache.Indexers{}, nil).Informer()
	// Decode once at ingest, so a decision cycle reads typed objects.
	_ = inf.SetTransform(func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		return fromUnstructured(u)
	})
	return &Store{client: client.Resource(Resource), informer: inf}
}

// Informer is the store's informer: run it, wait for it to sync, and add
// handlers to hear about changes.
func (s *Store) Informer() cache.SharedIndexInformer { return s.informer }

// List returns every reservation in the cache, by ID.
func (s *Store) List() []reservation.Reservation {
	items := s.informer.GetStore().List()
	out := make([]reservation.Reservation, 0, len(items))
	for _, it := range items {
		if o, ok := it.(*Object); ok {
			out = append(out, o.Reservation())
		}
	}
	slices.SortFunc(out, func(a, b reservation.Reservation) int { return compareID(a.ID, b.ID) })
	return out
}

func compareID(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Get returns the cached object of reservation id.
func (s *Store) Get(id int64) (*Object, error) {
	it, ok, err := s.informer.GetStore().GetByKey(Name(id))
	if err != nil {
		return nil, fmt.Errorf("reading reservation %d: %w", id, err)
	}
	if !ok {
		return nil, fmt.Errorf("reservation %d: %w", id, ErrNotFound)
	}
	return it.(*Object), nil
}

// Mint creates a lease or best-effort record; created is false when the
// pod already has it (a retry).
func (s *Store) Mint(ctx context.Context, r reservation.Reservation, podName string) (created bool, err error) {
	u, err := toUnstructured(toObject(r, podName))
	if err != nil {
		return false, err
	}
	_, err = s.client.Create(ctx, u, metav1.CreateOptions{FieldManager: fieldManager})
	if err == nil {
		return true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("creating lease %d for pod %s: %w", r.ID, r.PodUID, err)
	}
	existing, gerr := s.client.Get(ctx, Name(r.ID), metav1.GetOptions{})
	if gerr != nil {
		return false, fmt.Errorf("reading lease %d: %w", r.ID, gerr)
	}
	o, derr := fromUnstructured(existing)
	if derr != nil {
		return false, derr
	}
	if types.UID(o.Spec.PodUID) != r.PodUID {
		return false, fmt.Errorf("lease %d for pod %s: %w", r.ID, r.PodUID, ErrIDTaken)
	}
	return false, nil
}

const fieldManager = "gpu-reservation-controller"

// Cancel cancels a reservation; changed is false when it was cancelled
// already. The write carries the cached resourceVersion, so a concurrent
// change makes it fail (and the caller plans again).
func (s *Store) Cancel(ctx context.Context, id int64, reason reservation.CancelReason, supersededBy int64, at time.Time) (changed bool, err error) {
	o, err := s.Get(id)
	if err != nil {
		return false, err
	}
	if o.Status.State == string(reservation.StatusCancelled) {
		return false, nil
	}
	status := map[string]any{"state": reservation.StatusCancelled, "cancelReason": reason,
		"cancelledAt": at.UTC().Format(time.RFC3339)}
	if supersededBy != 0 {
		status["supersededBy"] = supersededBy
	}
	if err := s.patch(ctx, o, map[string]any{"status": status}); err != nil {
		return false, fmt.Errorf("cancelling reservation %d: %w", id, err)
	}
	return true, nil
}

// Reassign gives an open or future booking to another owner; the engine
// evicts the previous owner's pods under it.
func (s *Store) Reassign(ctx context.Context, id int64, owner string, at time.Time) error {
	o, err := s.Get(id)
	if err != nil {
		return err
	}
	if o.Spec.Kind != string(reservation.KindBooking) {
		return fmt.Errorf("reservation %d is a %s, only bookings can be reassigned: %w", id, o.Spec.Kind, ErrInvalid)
	}
	if o.Status.State == string(reservation.StatusCancelled) {
		return fmt.Errorf("reservation %d is cancelled: %w", id, ErrInvalid)
	}
	if o.Spec.Owner == owner {
		return nil
	}
	hist := append(slices.Clone(o.Status.PreviousOwners), OwnerHistory{Owner: o.Spec.Owner, Until: metav1.NewTime(at.UTC().Truncate(time.Second))})
	doc := map[string]any{
		"metadata": map[string]any{"labels": map[string]string{LabelOwner: owner}},
		"spec":     map[string]any{"owner": owner},
		"status":   map[string]any{"previousOwners": hist},
	}
	if err := s.patch(ctx, o, doc); err != nil {
		return fmt.Errorf("reassigning reservation %d: %w", id, err)
	}
	return nil
}

// ErrInvalid marks a request the store refuses for what it asks.
var ErrInvalid = errors.New("invalid reservation request")

// CreateBooking books a window and returns it with its new ID: one above
// the largest ID seen, moving on when another writer took it.
func (s *Store) CreateBooking(ctx context.Context, r reservation.Reservation) (reservation.Reservation, error) {
	r.Kind, r.Status, r.PodUID = reservation.KindBooking, reservation.StatusActive, ""
	var next int64
	for _, x := range s.List() {
		next = max(next, x.ID)
	}
	for range 20 {
		next++
		r.ID = next
		u, err := toUnstructured(toObject(r, ""))
		if err != nil {
			return reservation.Reservation{}, err
		}
		_, err = s.client.Create(ctx, u, metav1.CreateOptions{FieldManager: fieldManager})
		if err == nil {
			return r, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return reservation.Reservation{}, fmt.Errorf("creating booking: %w", err)
		}
	}
	return reservation.Reservation{}, errors.New("creating booking: no free id after 20 tries")
}

func (s *Store) patch(ctx context.Context, o *Object, doc map[string]any) error {
	meta, _ := doc["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		doc["metadata"] = meta
	}
	meta["resourceVersion"] = o.ResourceVersion
	body, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	_, err = s.client.Patch(ctx, o.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager})
	return err
}
