package tunnel

import (
	"os"
	"testing"

	"gpud.dev/gpud/internal/testutil"
)

// TestMain builds the static gpud whose `gpud agent --server` the
// end-to-end test registers.
func TestMain(m *testing.M) { os.Exit(testutil.MainWithStaticGpud(m)) }
