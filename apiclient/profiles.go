package apiclient

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/dsmlp/spawner/spawner"
)

// The profile list encodes options and choices as JSON objects in written
// order, which spawner's types marshal but do not unmarshal: these mirror
// types read them back, keeping the order.
type wireProfile struct {
	DisplayName    string          `json:"display_name"`
	Slug           string          `json:"slug"`
	Default        bool            `json:"default"`
	Description    string          `json:"description"`
	ProfileOptions json.RawMessage `json:"profile_options"`
	GPUClass       string          `json:"gpu_class"`
}

type wireOption struct {
	DisplayName    string                 `json:"display_name"`
	Choices        json.RawMessage        `json:"choices"`
	UnlistedChoice spawner.UnlistedChoice `json:"unlisted_choice"`
}

func profilesOf(ws []wireProfile) ([]spawner.Profile, error) {
	out := make([]spawner.Profile, 0, len(ws))
	for _, w := range ws {
		p := spawner.Profile{DisplayName: w.DisplayName, Slug: w.Slug, Default: w.Default, Description: w.Description, GPUClass: w.GPUClass}
		err := eachKey(w.ProfileOptions, func(name string, v json.RawMessage) error {
			var wo wireOption
			if err := json.Unmarshal(v, &wo); err != nil {
				return fmt.Errorf("option %q: %w", name, err)
			}
			o := spawner.ProfileOption{Name: name, DisplayName: wo.DisplayName, UnlistedChoice: wo.UnlistedChoice}
			err := eachKey(wo.Choices, func(key string, v json.RawMessage) error {
				ch := spawner.Choice{}
				if err := json.Unmarshal(v, &ch); err != nil {
					return fmt.Errorf("choice %q: %w", key, err)
				}
				ch.Name = key
				o.Choices = append(o.Choices, ch)
				return nil
			})
			if err != nil {
				return fmt.Errorf("option %q: %w", name, err)
			}
			p.ProfileOptions = append(p.ProfileOptions, o)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("decoding profile %q: %w", w.Slug, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// eachKey calls fn with every key and value of a JSON object, in written
// order; null or absent is an empty object.
func eachKey(raw json.RawMessage, fn func(key string, value json.RawMessage) error) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("want a JSON object, got %.40s", raw)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("%q: %w", key, err)
		}
		if err := fn(key, v); err != nil {
			return err
		}
	}
	_, err := dec.Token()
	return err
}
