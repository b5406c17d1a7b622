package hubapi

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// startBody is what the hub-side class posts for a spawn.
var startBody = []byte(`{"env":{"JUPYTERHUB_API_TOKEN":"0123456789abcdef0123456789abcdef","JUPYTERHUB_CLIENT_ID":"jupyterhub-user-alice",` +
	`"JUPYTERHUB_OAUTH_CALLBACK_URL":"/user/alice/oauth_callback","JUPYTERHUB_OAUTH_SCOPES":"[\"access:servers!server=alice/\"]",` +
	`"JUPYTERHUB_USER":"alice","JUPYTERHUB_SERVER_NAME":"","JUPYTERHUB_API_URL":"http://hub:8081/hub/api",` +
	`"JUPYTERHUB_ACTIVITY_URL":"http://hub:8081/hub/api/users/alice/activity","JUPYTERHUB_BASE_URL":"/",` +
	`"JUPYTERHUB_SERVICE_PREFIX":"/user/alice/"},"user_options":{"profile":"cpu","image":"scipy"},` +
	`"api_token":"0123456789abcdef0123456789abcdef","user_id":7,"hub_version":"3.0.0","start_timeout":300,"state":{},` +
	`"requested_by":{"kind":"user","name":"alice"}}`)

// decodeStrict's one pass stores and refuses exactly what the two passes
// (encoding/json, then the strict decoder) do, numbers in user_options
// included.
func TestDecodeStrictOnePassMatchesTwo(t *testing.T) {
	bodies := []string{
		string(startBody), `{}`, `null`, `{"user_options": {"n": 3, "f": 2.5, "big": 12345678901234567890, "e": 1e3, "neg": -4}}`,
		`{"user_options": {"z": 0, "nz": -0, "list": [1, -0, {"x": 9007199254740993}]}}`, `{"user_options": {"z": -0.0}}`,
		`{"user_id": 7, "start_timeout": -1}`, `{"user_options": null, "env": null, "state": null}`,
		`{"hub_version": "2026-01-01"}`, `{"requested_by": {"kind": "admin", "name": "bob"}}`,
		// Refusals.
		`{"env":`, `{} {}`, `[]`, `"x"`, `{"user_id": "seven"}`, `{"user_id": 1e400}`, `{"user_id": 1.5}`, `{"colour": 1}`,
		`{"ENV": {"A": "1"}}`, `{"env": {}, "env": {"A": "1"}}`, `{"env": {"A": "1", "A": "2"}}`, `{"USER_ID": "x"}`,
		`{"state": {"PVC_NAME": "a"}}`, `{"env": {"A": 1}}`, "{\"env\":{\"\\u0041\":\"1\",\"A\":\"2\"}}",
	}
	for _, body := range bodies {
		var one, two StartRequest
		errOne := decodeStrict(bytes.NewReader([]byte(body)), &one)
		errTwo := refuse([]byte(body), &two)
		if !reflect.DeepEqual(errOne, errTwo) {
			t.Errorf("%s: one pass refuses with %#v, two passes with %#v", body, errOne, errTwo)
			continue
		}
		if errOne != nil {
			continue
		}
		if !reflect.DeepEqual(one, two) {
			t.Errorf("%s: one pass stores %#v, two passes %#v", body, one, two)
		}
		// DeepEqual takes -0 for 0: the JSON forms tell them apart.
		a, _ := json.Marshal(one)
		b, _ := json.Marshal(two)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: one pass stores %s, two passes %s", body, a, b)
		}
	}
}

// FuzzDecodeStrictOnePass compares the one pass with the two on any body.
func FuzzDecodeStrictOnePass(f *testing.F) {
	for _, s := range []string{string(startBody), `{"user_options": {"a": [1, -0, {"b": 2.0}]}}`, `{"ENV": {}}`, `{"env": {"A": "1", "A": "2"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var one, two StartRequest
		errOne := decodeStrict(bytes.NewReader(data), &one)
		errTwo := refuse(data, &two)
		if len(bytes.TrimSpace(data)) == 0 {
			return
		}
		if !reflect.DeepEqual(errOne, errTwo) {
			t.Fatalf("%q: one pass refuses with %#v, two passes with %#v", data, errOne, errTwo)
		}
		a, _ := json.Marshal(one)
		b, _ := json.Marshal(two)
		if errOne == nil && (!reflect.DeepEqual(one, two) || !bytes.Equal(a, b)) {
			t.Fatalf("%q: one pass stores %s, two passes %s", data, a, b)
		}
	})
}

func BenchmarkDecodeStrict(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		var r StartRequest
		if err := decodeStrict(bytes.NewReader(startBody), &r); err != nil {
			b.Fatal(err)
		}
	}
}
