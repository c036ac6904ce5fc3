package snapid

import "runtime"

func runtimeGOMAXPROCS() int { return runtime.GOMAXPROCS(0) }
