package config

import "github.com/hookledger/hookledger/internal/store"

// Owners are the configured owners of the exception queue's entries: each
// destination's owner: for its dead effects, each flow's for the events it
// dead-letters. Names without an owner are left out.
func (c *Config) Owners() store.Owners {
	o := store.Owners{Destinations: map[string]string{}, Flows: map[string]string{}}
	for _, d := range c.Destinations {
		if d.Owner != "" {
			o.Destinations[d.Name] = d.Owner
		}
	}
	for _, f := range c.Flows {
		if f.Owner != "" {
			o.Flows[f.Name] = f.Owner
		}
	}
	return o
}
