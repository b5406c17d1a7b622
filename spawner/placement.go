package spawner

import (
	"sort"
	"sync"
)

// placementTraits are the traits that decide a pod's namespace.
var placementTraits = []string{"namespace", "enable_user_namespaces", "user_namespace_template"}

// placement is what the configuration can do with a pod's namespace: the
// settings of the base, of every profile and of every listed choice.
type placement struct {
	variants []*Settings
	// open: a user's free text (an unlisted choice) can set the namespace.
	open bool
}

type placementCache struct {
	mu sync.Mutex
	p  *placement
}

func (c *Config) placement() *placement {
	c.place.mu.Lock()
	defer c.place.mu.Unlock()
	if c.place.p != nil {
		return c.place.p
	}
	p := &placement{}
	add := func(opts map[string]any) {
		if s, err := c.Resolve(opts); err == nil {
			p.variants = append(p.variants, s)
		}
	}
	add(nil)
	for _, prof := range c.profiles {
		add(map[string]any{"profile": prof.Slug})
		for _, o := range prof.ProfileOptions {
			for _, ch := range o.Choices {
				add(map[string]any{"profile": prof.Slug, o.Name: ch.Name})
			}
			for _, t := range placementTraits {
				if _, ok := o.UnlistedChoice.KubeSpawnerOverride[t]; ok && o.UnlistedChoice.Enabled {
					p.open = true
				}
			}
		}
	}
	c.place.p = p
	return p
}

// Namespaces returns the namespaces this configuration can put a notebook
// pod in, sorted; all is true when that is any namespace (user namespaces,
// or a namespace from a user's free text).
func (c *Config) Namespaces() (namespaces []string, all bool) {
	p := c.placement()
	seen := map[string]bool{}
	for _, s := range p.variants {
		if s.EnableUserNamespaces {
			return nil, true
		}
		if !seen[s.Namespace] {
			seen[s.Namespace] = true
			namespaces = append(namespaces, s.Namespace)
		}
	}
	if p.open {
		return nil, true
	}
	sort.Strings(namespaces)
	return namespaces, false
}

// MayHold reports whether this configuration can put a pod of that hub
// server in namespace ns: the base, a profile or a choice places it there,
// or the user's own namespace is ns. A pod elsewhere is not the server's,
// whatever its labels say.
func (c *Config) MayHold(user, server string, userID int, ns string) bool {
	p := c.placement()
	if p.open {
		return true
	}
	for _, s := range p.variants {
		if !s.EnableUserNamespaces {
			if s.Namespace == ns {
				return true
			}
			continue
		}
		if n, err := NewNames(s, user, server, userID, ""); err == nil && n.Namespace == ns {
			return true
		}
	}
	return false
}
