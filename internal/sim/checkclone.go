package sim

import (
	"fmt"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/registry"
)

// The check of a clone's claim (a probable clone must be refused).

// cloneClaim says why an Open of ho about to claim its name must be
// refused as a probable clone ("" if it need not): the row is active,
// with this counter's owner token, from another machine (its host name
// or its machine id differs), and was seen within the clone window, less
// a step of slack, on the registry's clock.
func (w *world) cloneClaim(ho *host, running bool) string {
	if ho.cloneOf == nil || !ho.cfg.Registry || running || ho.takeSet {
		return ""
	}
	row, ok := w.reg0.Row(ho.cfg.Name)
	if !ok || row.State != registry.StateActive || row.Owner != w.ownerToken(ho) ||
		row.Hostname == ho.info.Hostname && row.MachineID == ho.info.MachineID {
		return ""
	}
	if age := w.clock.now().Sub(row.LastSeen); age < cloneWindow-stepTime {
		return fmt.Sprintf("the row is active with its owner token on another machine (%s, %s), seen %v ago: a probable clone", row.Hostname, row.MachineID, age)
	}
	return ""
}

// ownerToken is the owner token of ho's counter ("" if unreadable).
func (w *world) ownerToken(ho *host) string {
	tok, err := admin.OwnerToken(ho.counter)
	if err != nil {
		return ""
	}
	return tok
}
