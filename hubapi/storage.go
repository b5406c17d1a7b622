package hubapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dsmlp/spawner/lifecycle"
)

// deleteForever is the hub's Spawner.delete_forever: DELETE
// …/server[s/{name}]/storage once the hub deletes a user or a named server.
// The query carries the hub's saved state (pvc_name, namespace) and the
// user's id. The answer is 200 with what happened to the PVC (deleted,
// absent or kept); repeating it is harmless.
func (h *handlers) deleteForever(c echo.Context) error {
	key, err := h.key(c)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	for name := range q {
		switch name {
		case "pvc_name", "namespace", "user_id":
		default:
			return &apiError{status: http.StatusBadRequest, msg: "unknown query parameter " + name, field: name}
		}
		if len(q[name]) > 1 {
			return &apiError{status: http.StatusBadRequest, msg: name + " is given more than once", field: name}
		}
	}
	saved := lifecycle.SavedState{PVCName: q.Get("pvc_name"), Namespace: q.Get("namespace")}
	if err := checkPVCName(saved.PVCName, "pvc_name"); err != nil {
		return err
	}
	if ns := saved.Namespace; ns != "" && len(validation.IsDNS1123Label(ns)) > 0 {
		return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("namespace %q is not a valid namespace name: %s", ns, strings.Join(validation.IsDNS1123Label(ns), "; ")), field: "namespace"}
	}
	if v := q.Get("user_id"); v != "" {
		id, err := strconv.Atoi(v)
		if err != nil || id < 0 {
			return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("user_id must be a non-negative integer, not %q", v), field: "user_id"}
		}
		saved.UserID = id
	}
	d, err := h.opts.Servers.DeleteForever(c.Request().Context(), key, saved)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

// checkPVCName refuses a saved PVC name that no PVC can have; "" is none.
func checkPVCName(name, field string) error {
	if name == "" {
		return nil
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("%s %q is not a valid PVC name: %s", field, name, strings.Join(errs, "; ")), field: field}
	}
	return nil
}
