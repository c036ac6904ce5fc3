package prometheus_test

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/snapid/snapid/admin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// The alerting rules in the docs parse as Prometheus rule files, each
// alert has a severity and a summary, and every snapid metric they use is
// one the collector exports (with a sequence open).
func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile("../docs/alerts.yml")
	require.NoError(t, err)
	var rf ruleFile
	dec := yaml.NewDecoder(bytesReader(b))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&rf))
	require.Len(t, rf.Groups, 1)

	g, sreg, _ := openWithRegistry(t)
	_, err = admin.CreateSequence(context.Background(), sreg, "orders", 1, 1<<31-1)
	require.NoError(t, err)
	s, err := g.Sequence("orders")
	require.NoError(t, err)
	defer s.Close()
	reg := prom.NewPedanticRegistry()
	require.NoError(t, reg.Register(newCollectorWithRate(t, g)))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	exported := map[string]bool{"snapid_registry_last_heartbeat_timestamp_seconds": true}
	for _, mf := range mfs {
		exported[mf.GetName()] = true
	}
	metric := regexp.MustCompile(`snapid_[a-z_]+`)
	alerts := map[string]bool{}
	for _, r := range rf.Groups[0].Rules {
		alerts[r.Alert] = true
		assert.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
		assert.NotEmpty(t, r.Annotations["summary"], r.Alert)
		if r.For != "" {
			_, err := time.ParseDuration(r.For)
			assert.NoError(t, err, r.Alert)
		}
		for _, m := range metric.FindAllString(r.Expr, -1) {
			assert.True(t, exported[m], "%s uses %s, which the collector does not export", r.Alert, m)
		}
	}
	assert.Equal(t, map[string]bool{"SnapidReservationBelowOneHour": true, "SnapidRegistryUnreachable": true,
		"SnapidSessionSuperseded": true, "SnapidSequenceSpaceLow": true}, alerts)
}
