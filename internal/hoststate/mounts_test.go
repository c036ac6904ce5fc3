package hoststate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A mount point /etc/fstab or a mount unit lists at the place or above
// it, not mounted now, hides the place: it is named; one mounted, or none
// listed, is not.
func TestNotMounted(t *testing.T) {
	t.Parallel()
	points := fstabPoints([]byte(`# /etc/fstab
UUID=1 / ext4 defaults 0 1
UUID=2 /var/lib/snapid ext4 defaults,nofail 0 2
UUID=3 none swap sw 0 0
UUID=4 /srv/with\040space xfs defaults 0 2
`))
	points = append(points, unitPoints([]byte("[Unit]\nDescription=data\n\n[Mount]\nWhat=/dev/sdc1\nWhere=/data\nType=xfs\n"))...)
	points = append(points, unitPoints([]byte("[Mount]\nWhat=/dev/sdd1\nWhere = /spaced\n"))...)
	require.Equal(t, []string{"/", "/var/lib/snapid", "/srv/with space", "/data", "/spaced"}, points)
	mounted := mountedPoints([]byte(`22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 8:4 / /srv/with\040space rw shared:3 - xfs /dev/sdb1 rw
`))
	cases := []struct{ path, want string }{
		{"/var/lib/snapid/records", "/var/lib/snapid"},
		{"/var/lib/snapid", "/var/lib/snapid"},
		{"/var/lib/snapidx/records", ""},
		{"/srv/with space/records", ""},
		{"/data/records", "/data"},
		{"/opt/records", ""},
	}
	for _, c := range cases {
		require.Equal(t, c.want, notMounted(c.path, points, mounted), c.path)
	}
	mounted["/var/lib/snapid"] = true
	require.Empty(t, notMounted("/var/lib/snapid/records", points, mounted))
}
