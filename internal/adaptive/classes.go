package adaptive

import (
	"math"

	"github.com/olcd/olcd/internal/olc"
)

// splitClasses splits the node's drop probability p (a share of all new
// work) over the classes by demand weight, least protected first, each up to
// the bound; a class without demand gets the bound when the split reaches it.
func splitClasses(p, bound float64, weights [olc.NumClasses]float64) [olc.NumClasses]float64 {
	var out [olc.NumClasses]float64
	var total float64
	for _, w := range weights {
		total += w
	}
	if p <= 0 || total <= 0 {
		return out
	}
	remaining := p * total
	for _, cl := range [...]olc.Class{olc.ClassBestEffort, olc.ClassNormal, olc.ClassCritical} {
		if remaining <= 1e-12*total {
			break
		}
		w := weights[cl]
		if w <= 0 {
			out[cl] = bound
			continue
		}
		out[cl] = math.Min(bound, remaining/w)
		remaining -= out[cl] * w
	}
	return out
}
