package statefile

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// UserName returns the login name of uid from /etc/passwd, or "uid N".
func UserName(uid uint32) string {
	f, err := os.Open("/etc/passwd")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) > 2 && fields[2] == strconv.FormatUint(uint64(uid), 10) {
				return fields[0]
			}
		}
	}
	return "uid " + strconv.FormatUint(uint64(uid), 10)
}
